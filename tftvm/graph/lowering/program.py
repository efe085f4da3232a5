"""A Relax function run as a chain of tftvm ops: one TvmCall per fused TVM kernel.

Relax's own passes legalize the high-level ops to TIR and fuse them
(LegalizeOps, FuseOps, FuseTIR); every resulting `call_tir` is a PrimFunc in
destination-passing style, which is exactly what `tftvm.op` takes. So a
cluster needs no Relax VM inside TF: its kernels become TvmCall nodes wired
the way the fused Relax function wires them.
"""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)


# Calls (legalized Relax ops) merged into one weight-preparation kernel; see _group_whole.
CALLS_PER_KERNEL = 40


def fuse(mod, merged: str | None = None):
    """Legalize and fuse a Relax module with TVM's CPU legalization passes (relax.backend.
    cpu_generic), its LegalizeOps given tftvm's own legalizations where TVM's are wrong or slow
    on CPU: NaNs passed on as TF does, conv and matmul weights packed, vector transcendentals,
    float sums from -0.0.
    Float arithmetic TVM would fold by int rules is first written out (float_folds), a zero pad before a conv folded into the conv (fold_pads), and the stride of a
    strided 1x1 conv moved up into the ops before it (fold_strides), and a view that only
    views read repeated per reader (shared_views). The function named
    `merged` becomes a few large kernels (see `_group_whole`)."""
    import tvm
    from tvm import relax
    from tvm.relax.backend.cpu_generic import legalize_passes

    from . import (arg_reduce, denormals, fast_math, float_folds, fold_pads, fold_strides, nans, pack_weights,
                   shared_views, signed_zeros)

    legalize = relax.transform.LegalizeOps(customize_legalize_map={
        **pack_weights.legalize_map(), **nans.legalize_map(), **fast_math.legalize_map(),
        **arg_reduce.legalize_map(), **denormals.legalize_map(), **signed_zeros.legalize_map()})
    passes = [legalize if p.info.name == "LegalizeOps" else p
              for p in legalize_passes(tvm.target.Target.current(allow_none=True))]  # fmt: skip
    seq = tvm.transform.Sequential
    # Bindings of one variable to another (a converted Identity, say) are nodes FuseOps cannot
    # look through: with them no conv takes its bias, batch norm and ReLU, nor the pad before it.
    mod = float_folds.rewrite(relax.transform.CanonicalizeBindings()(mod))
    mod = fold_strides.fold(fold_pads.fold(mod))
    mod = shared_views.unshare(mod)
    mod = seq(passes)(mod)
    grouped = _group_whole(mod, merged, CALLS_PER_KERNEL) if merged is not None else None
    if grouped is not None:
        mod = relax.transform.FuseTIR()(grouped)
    return relax.transform.DeadCodeElimination()(_reshapes_as_views(mod))


def _reshapes_as_views(mod):
    """Relax's RewriteDataflowReshape: kernels that only reshape become reshapes (TF's, or the
    VM's views), not copies. It derives the new shape wrong for a tensor of no elements (a
    transpose of static dims [0, 1] became a reshape to [1, 1], which Relax refuses): there
    the kernels stay copies, which is all they cost."""
    from tvm import relax

    try:
        return relax.transform.RewriteDataflowReshape()(mod)
    except (ValueError, RuntimeError) as err:  # TVM's errors are these types
        log.debug("reshape kernels kept as copies: %s", err)
        return mod


def _group_whole(mod, name: str, calls_per_kernel: int):
    """Make the kernel calls of `mod[name]` (one tuple param, one dataflow block, a tuple of
    results) primitive functions of at most `calls_per_kernel` calls each, in order, which
    FuseTIR then merges into one kernel each: the weight preparation of a model
    (LiftTransformParams' `main_transform_params`) runs as a few memoized nodes, not one node
    per batch norm. Not one kernel for all of it: LLVM's time on a function grows faster than
    its size. Two equal parts are one function (BlockBuilder.add_func). None where the
    function is not of that form."""
    from tvm import relax
    from tvm.relax.utils import copy_with_new_vars

    func = mod[name]
    if len(func.params) != 1 or len(func.body.blocks) != 1:
        return None
    (param,) = func.params
    items, group, rest = [], [], []
    for b in func.body.blocks[0].bindings:
        v = b.value
        if isinstance(v, relax.TupleGetItem) and v.tuple_value.same_as(param):
            items.append(b)
        elif isinstance(v, relax.Call) and len(v.args) == 2:  # a call_tir without symbolic dims
            group.append(b)
        elif isinstance(v, relax.TupleGetItem) and any(v.tuple_value.same_as(g.var) for g in group):
            group.append(b)
        elif isinstance(v, relax.Tuple) and all(isinstance(f, relax.Var) for f in v.fields):
            rest.append(b)
        else:
            return None
    if sum(isinstance(g.value, relax.Call) for g in group) < 2:
        return None
    chunks = _chunks(group, calls_per_kernel)
    uses = [_free_vars(b.value) for b in group + rest]  # binding i of group + rest uses these
    bb = relax.BlockBuilder(mod)
    fresh = {}  # original var -> the caller's
    bindings = []
    for b in items:
        fresh[b.var] = relax.DataflowVar(b.var.name, b.var.ty)
        bindings.append(relax.VarBinding(fresh[b.var], b.value))
    first = 0  # index in group of the chunk's first binding
    for i, chunk in enumerate(chunks):
        defined = {b.var for b in chunk}
        later = set().union(*uses[first + len(chunk):])
        inputs = list(dict.fromkeys(v for u in uses[first : first + len(chunk)] for v in u if v not in defined))
        outputs = [b.var for b in chunk if b.var in later]
        first += len(chunk)
        result = relax.Var("weights", relax.TupleType([o.ty for o in outputs]))
        block = relax.DataflowBlock(list(chunk) + [relax.VarBinding(result, relax.Tuple(outputs))])
        inner = relax.Function(inputs, relax.SeqExpr([block], result), result.ty).with_attr("Primitive", True)
        suffix = "as_one_kernel" if len(chunks) == 1 else f"as_kernel{i}"
        gv = bb.add_func(copy_with_new_vars(inner), f"{name}_{suffix}")
        merged = relax.DataflowVar("weights", result.ty)
        bindings.append(relax.VarBinding(merged, relax.Call(gv, [fresh[v] for v in inputs])))
        for k, o in enumerate(outputs):
            fresh[o] = relax.DataflowVar(o.name, o.ty)
            bindings.append(relax.VarBinding(fresh[o], relax.TupleGetItem(merged, k)))
    for b in rest:
        bindings.append(relax.VarBinding(b.var, relax.Tuple([fresh[f] for f in b.value.fields])))
    mod = bb.get()
    body = relax.SeqExpr([relax.DataflowBlock(bindings)], func.body.body)
    mod[name] = relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs)
    return mod


def _chunks(group: list, calls_per_kernel: int) -> list:
    """`group`'s bindings in order, cut before a call once a chunk has `calls_per_kernel`
    calls; a TupleGetItem stays with the call before it."""
    from tvm import relax

    chunks, calls = [[]], 0
    for b in group:
        if isinstance(b.value, relax.Call):
            if calls == calls_per_kernel:
                chunks.append([])
                calls = 0
            calls += 1
        chunks[-1].append(b)
    return chunks


def _free_vars(expr) -> set:
    from tvm import relax

    return set(relax.analysis.free_vars(expr))


class RelaxProgram:
    """Callable on TF tensors: runs the fused kernels of `mod["main"]` as tftvm ops.

    `weights`: indices of the inputs that are a model's variables (constant from call to
    call, unknown at compile time). What is computed from them alone (a batch norm's
    `rsqrt(variance + eps) * scale`) is lifted out of the activation kernels by Relax's
    LiftTransformParams into kernels of its own: fused into a conv, the schedule would
    recompute it per output element. `precision="bf16"`: products in bf16 where the CPU has
    the units (lowering/precision.py; `self.precision` says what ran). With
    `memoize_weights`, those kernels are memoized nodes (TvmOp.memoized): they run again
    only when a variable is given a new buffer. Not for a training step, whose variables
    change every call: a held buffer would make each update copy the variable first.
    """

    def __init__(self, mod, name: str, target=None, schedule: bool = True, database=None, weights=(),
                 memoize_weights: bool = False, precision: str = "f32"):  # fmt: skip
        import tensorflow as tf

        from ...kernel import resolve_target
        from ...op import op
        from . import fold_scales, fold_strides, pack_weights
        from .precision import PrecisionReport, to_bf16

        self.name = name
        self.params = list(mod["main"].params)
        mod = fold_scales.fold(mod, sorted(weights))
        self.precision = PrecisionReport()
        if precision == "bf16":  # strides moved before the products become bf16 kernels (fuse does it for f32)
            mod = to_bf16(fold_strides.fold(mod), resolve_target(target), self.precision, sorted(weights))
        if memoize_weights:
            mod = pack_weights.pack_prepared(mod, sorted(weights))
        lifted = _lift_weights(mod, sorted(weights)) if weights else None
        if lifted is not None:
            mod, self._runtime, self._weights = lifted
        # Memoized, the weight preparation runs once: a few nodes for all of it, not one per kernel.
        fused = fuse(mod, merged="main_transform_params" if lifted is not None and memoize_weights else None)
        self.kernels = []  # the tftvm ops, in call order

        def kernel(gv, out_tys, tir_vars):
            func, dims = dims_as_inputs(fused[gv], out_tys, tir_vars)
            # Only the TvmCall nodes below call these kernels, and they check every argument.
            compiled = op(func, num_outputs=len(out_tys), name=f"{name}/{gv.name_hint}", target=target,
                          schedule=schedule, database=database, argument_checks=False)  # fmt: skip
            self.kernels.append(compiled)
            return compiled, dims

        self._prepare = None
        if lifted is not None:
            self._prepare = _Steps(name, fused["main_transform_params"], kernel, memoize=memoize_weights)
        self._main = _Steps(name, fused["main"], kernel)
        self.output_shapes = _static_dims(fused["main"].ret_ty)
        self._tf = tf

    def __call__(self, *inputs):
        if len(inputs) != len(self.params):
            raise TypeError(f"{self.name} takes {len(self.params)} inputs, got {len(inputs)}")
        if self._prepare is not None:
            # main_transform_params takes the weights as one tuple
            prepared = self._prepare.run([tuple(inputs[i] for i in self._weights)], self._tf)
            inputs = [inputs[i] for i in self._runtime] + list(prepared)
        return self._main.run(inputs, self._tf)


def _lift_weights(mod, weights: list):
    """`mod` with what its weights alone compute lifted into `main_transform_params`, whose
    results `main` takes after its other inputs: (module, runtime input indices, weight
    input indices); None where nothing is computed from the weights alone."""
    import tvm
    from tvm import relax

    main = mod["main"]
    runtime = [i for i in range(len(main.params)) if i not in weights]
    params = [main.params[i] for i in runtime + weights]
    moved = relax.Function(params, main.body, main.ret_ty, main.is_pure, main.attrs)
    mod = tvm.IRModule(dict(mod.functions))
    mod["main"] = moved.with_attr("num_input", len(runtime))
    lifted = relax.transform.LiftTransformParams()(mod)
    prepare = lifted["main_transform_params"]
    if not any(isinstance(b.value, relax.Call) for block in prepare.body.blocks for b in block.bindings):
        return None  # the weights are only passed through
    return lifted, runtime, weights


class _Steps:
    """The bindings of one fused Relax function, each a tftvm op call or a TF-side step."""

    def __init__(self, name: str, func, kernel, memoize: bool = False):
        from tvm import relax

        self.name = name
        self.params = list(func.params)
        self.steps = []  # (var, op or None, args or value)
        for block in func.body.blocks:
            for binding in block.bindings:
                value = binding.value
                if isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.call_tir":
                    gv, args = value.args[:2]
                    tir_vars = list(value.args[2].values) if len(value.args) > 2 else []
                    out_ty = value.ty_args[0]
                    out_tys = list(out_ty.fields) if isinstance(out_ty, relax.TupleType) else [out_ty]
                    compiled, dims = kernel(gv, out_tys, tir_vars)
                    run = compiled.memoized if memoize else compiled
                    if isinstance(out_ty, relax.TupleType) and len(out_tys) == 1:  # the op returns a tensor
                        run = _as_tuple(run)
                    self.steps.append((binding.var, run, list(args.fields) + dims))
                elif isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.reshape":
                    self.steps.append((binding.var, _reshape, list(value.args)))
                elif isinstance(value, (relax.Tuple, relax.TupleGetItem, relax.Var)):
                    self.steps.append((binding.var, None, value))
                else:
                    raise NotImplementedError(f"{name}: cannot run Relax binding {value}")
        self.result = func.body.body
        self._constants: dict = {}  # id -> (expr kept alive, NumPy value)

    def run(self, inputs, tf):
        env = list(zip(self.params, inputs))
        for var, kernel, args in self.steps:
            if kernel is None:
                env.append((var, self._resolve(args, env, tf)))
            else:
                env.append((var, kernel(*[self._resolve(a, env, tf) for a in args])))
        return self._resolve(self.result, env, tf)

    def _resolve(self, expr, env, tf):
        import tvm
        from tvm import relax, tirx

        if isinstance(expr, relax.Tuple):
            return tuple(self._resolve(f, env, tf) for f in expr.fields)
        if isinstance(expr, relax.TupleGetItem):
            return self._resolve(expr.tuple_value, env, tf)[expr.index]
        if tvm.ir.is_prim_expr(expr):  # a symbolic dim a kernel takes as a scalar
            return _eval_dim(expr, env[: len(self.params)])
        if isinstance(expr, relax.Var):
            for var, value in env:
                if var.same_as(expr):
                    return value
            raise KeyError(f"{self.name}: unbound Relax variable {expr.name}")
        if isinstance(expr, relax.ShapeExpr):
            return [int(d.value) if isinstance(d, tirx.IntImm) else _eval_dim(d, env[: len(self.params)])
                    for d in expr.values]  # fmt: skip
        if hasattr(expr, "value"):  # a constant folded into the program
            key = id(expr)
            if key not in self._constants:  # NumPy, not a tensor: a tensor would belong to one trace
                self._constants[key] = (expr, expr.value.numpy())
            return tf.constant(self._constants[key][1])
        raise NotImplementedError(f"{self.name}: cannot pass {expr} to a kernel")


def _as_tuple(run):
    return lambda *args: (run(*args),)


def _static_dims(ty) -> list:
    """Per output of a Relax function's result, its dims as Relax knows them statically
    (an int, or None for a symbolic dim; None for an unknown rank)."""
    from tvm import relax, tirx

    fields = list(ty.fields) if isinstance(ty, relax.TupleType) else [ty]
    out = []
    for field in fields:
        shape = getattr(field, "shape", None)
        values = getattr(shape, "values", None)
        out.append(None if values is None else [int(d.value) if isinstance(d, tirx.IntImm) else None for d in values])
    return out


def dims_as_inputs(func, out_tys: list, tir_vars: list):
    """`func` with its params reordered to inputs, dims, outputs; and the dims' expressions
    in the caller's symbolic dims.

    Relax's PrimFuncs take (inputs, outputs, tir_vars); tftvm ops take inputs then outputs,
    and TF allocates outputs from shapes the inputs determine. So call_tir's tir_vars, and any
    output dim that no input dim gives (a Fill to a symbolic shape), become scalar inputs.
    """
    from tvm import tirx

    params, n_out = list(func.params), len(out_tys)
    n_in = len(params) - n_out - len(tir_vars)
    ins, outs, scalars = params[:n_in], params[n_in : n_in + n_out], params[n_in + n_out :]
    known = scalars + [p for p in ins if not isinstance(p.ty, tirx.BufferType)]  # FuseTIR's own
    known += [d for p in ins if isinstance(p.ty, tirx.BufferType) for d in p.ty.shape if isinstance(d, tirx.Var)]
    free = []
    for d in (d for p in outs for d in p.ty.shape if not isinstance(d, tirx.IntImm)):
        for v in tirx.analysis.undefined_vars(d):
            if not any(v.same_as(k) for k in known + free):
                free.append(v)
    if not scalars and not free:
        return func, []
    reordered = tirx.PrimFunc(ins + scalars + free + outs, func.body, func.ret_type, func.attrs)
    return reordered, tir_vars + [_caller_dim(v, outs, out_tys) for v in free]


def _caller_dim(var, outs, out_tys):
    """The caller's expression for a PrimFunc dim var: the output dim it stands for."""
    for param, ty in zip(outs, out_tys):
        for dim, caller in zip(param.ty.shape, ty.shape):
            if dim.same_as(var):
                return caller
    raise NotImplementedError(f"output dim {var} is only part of an expression")


def _reshape(x, shape):
    import tensorflow as tf

    if any(isinstance(d, tf.Tensor) for d in shape):
        shape = tf.stack([d if isinstance(d, tf.Tensor) else tf.constant(d, tf.int64) for d in shape])
    return tf.reshape(x, shape)


_TF_BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "FloorDiv": "floordiv",
              "FloorMod": "floormod", "Min": "minimum", "Max": "maximum"}  # fmt: skip


def _eval_dim(expr, params):
    """An int64 TF scalar for a PrimExpr over the symbolic dims of the program's inputs."""
    import tensorflow as tf
    from tvm import tirx

    if isinstance(expr, tirx.IntImm):
        return tf.constant(int(expr.value), tf.int64)
    if isinstance(expr, tirx.Var):
        for var, value in params:
            for axis, dim in enumerate(var.ty.shape):
                if dim.same_as(expr):
                    return tf.shape(value, out_type=tf.int64)[axis]
        raise KeyError(f"symbolic dim {expr} is no input dim")
    if isinstance(expr, tirx.Cast):
        return _eval_dim(expr.value, params)
    fn = _TF_BINARY.get(type(expr).__name__)
    if fn is None:
        raise NotImplementedError(f"cannot compute the dim {expr} in TF")
    return getattr(tf.math, fn)(_eval_dim(expr.a, params), _eval_dim(expr.b, params))
