"""precision="bf16": matmuls and convs in bf16 with f32 accumulation, on the CPU's matrix units.

The rule: a product runs in bf16 only where the CPU has bf16 instructions that a kernel here
uses: AMX tiles (cpu.amx, Intel Sapphire Rapids and later), else AVX512-BF16's VDPBF16PS
(cpu.avx512_bf16, Zen 4 and Cooper Lake); elsewhere it stays f32, since bf16 values fed to
f32 FMAs only add conversions. Both units read the same packed weights (cpu.vnni_layout).
The products it takes: a matmul of f32 activations [..., k] by f32 weights [k, n] (a Dense
layer, a projection), and an NHWC conv of f32 weights without groups (a 1x1 conv of stride 1
without padding as the same matmul over pixels, others as a conv), with k (the input
channels) padded with zeros to the unit's step (AMX: 32, AVX512-BF16: 2) where that at most
doubles the multiplies (`_reduction`), and static image sizes. Its activations are rounded
to bf16 as they enter (the cast fuses into the kernel that makes them; a conv's padding with
it) and its weights once (a constant expression: Relax folds it, or LiftTransformParams
lifts it out of the call when the weights are variables), packed in the order the tiles
read. Results stay f32: the elementwise ops between products (bias, activations, norms,
softmax) run in f32, as oneDNN's and OpenVINO's bf16 modes do, and the error is the rounding
of the products' inputs.
"""
from __future__ import annotations

import dataclasses
import logging

log = logging.getLogger(__name__)

PRECISIONS = ("f32", "bf16")


def check(precision: str) -> str:
    """`precision` as given, where it is one tftvm knows; else a ValueError naming the argument."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return precision


@dataclasses.dataclass
class PrecisionReport:
    """What a precision rewrite did: products moved to bf16 units, and those left in f32."""

    precision: str = "f32"
    units: str = ""  # what the bf16 products run on ("AMX-BF16", "AVX512-BF16"), "" where none
    products: int = 0  # matmuls and convs seen
    in_bf16: int = 0  # of those, how many run in bf16
    post_ops: int = 0  # of those, how many write their results through their bias, residual add and activation
    left: list = dataclasses.field(default_factory=list)  # (op, why) for each product left in f32

    def text(self) -> str:
        if self.precision == "f32":
            return "precision: f32"
        if not self.units:
            return "precision: bf16 asked, but this CPU has no bf16 instructions tftvm uses: f32"
        text = f"precision: bf16 on {self.units}: {self.in_bf16} of {self.products} matmuls/convs"
        text += f", {self.post_ops} with their bias (and residual, activation) fused" if self.post_ops else ""
        reasons = sorted({why for _, why in self.left})
        return text + (f"; in f32: {'; '.join(reasons)}" if reasons else "")


def combined(reports: list) -> PrecisionReport:
    """One report for several programs (an optimize result's clusters)."""
    out = PrecisionReport()
    for r in reports:
        out.precision = r.precision if r.precision != "f32" else out.precision
        out.units = out.units or r.units
        out.products += r.products
        out.in_bf16 += r.in_bf16
        out.post_ops += r.post_ops
        out.left += r.left
    return out


def to_bf16(mod, target=None, report: PrecisionReport | None = None, weights=()):
    """`mod` with the eligible products of its functions in bf16 (see the module's rule);
    `report`, if given, is filled in. Weights are constants, or what `main` computes from
    its params at the indices `weights` (a model's variables) alone."""
    import tvm
    from tvm import relax

    from ...cpu import features
    from .fold_scales import weight_derived

    report = report if report is not None else PrecisionReport()
    report.precision = "bf16"
    unit = _unit(target)
    if unit is None:
        return mod
    report.units = unit.name
    kernels = {}  # the bf16 kernels added: name -> (GlobalVar, make(post ops) -> PrimFunc)
    static = weight_derived(mod["main"], weights)  # computed from constants and weight params alone

    @relax.expr_functor.mutator
    class Products(relax.PyExprMutator):
        def visit_call_(self, call):
            call = self.visit_expr_post_order(call)
            name = getattr(call.op, "name", "")
            if name not in ("relax.matmul", "relax.nn.conv2d"):
                return call
            report.products += 1
            plan = _matmul_plan(call, unit) if name == "relax.matmul" else _conv_plan(call, unit)
            if not isinstance(plan, str) and not _is_weight(call.args[1], static):
                plan = "weights computed at run time"
            if isinstance(plan, str):
                report.left.append((name, plan))
                return call
            report.in_bf16 += 1
            return plan(self.builder_, kernels)

    rewriter = Products(mod)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    log.info("%s", report.text())
    if not report.in_bf16:
        return mod
    out = tvm.IRModule(dict(rewriter.builder_.get().functions))
    return relax.transform.DeadCodeElimination()(_with_post_ops(out, dict(kernels.values()), report))


@dataclasses.dataclass(frozen=True)
class _Unit:
    name: str  # the instructions, as the report says them
    prefix: str  # of its kernels' names
    kernels: object  # the module with its matmul_bf16, conv2d_bf16 and K_STEP


def _unit(target) -> _Unit | None:
    """The bf16 unit kernels for `target` use: AMX where the CPU has it, else AVX512-BF16."""
    from ...cpu import amx, avx512_bf16, features

    if features.amx_bf16(target):
        return _Unit("AMX-BF16", "amx", amx)
    if features.avx512_bf16(target):
        return _Unit("AVX512-BF16", "avx512", avx512_bf16)
    return None


def bf16_units(target=None) -> str:
    """What precision="bf16" runs products on for `target` (None: this host): "AMX-BF16",
    "AVX512-BF16", or "" where neither (the products stay f32)."""
    unit = _unit(target)
    return unit.name if unit else ""


def _matmul_plan(call, unit: _Unit):
    """How a matmul runs on `unit` (a function of the block builder and the kernels added),
    or why it does not."""
    x, w = call.args
    why = _f32_why(call, x, w)
    if why:
        return why
    x_dims, w_dims = _shape(x), _shape(w)
    if x_dims is None or w_dims is None or len(w_dims) != 2 or len(x_dims) < 2:
        return "not activations [..., k] by weights [k, n]"
    if _static(w_dims) is None:
        return "weights of symbolic shape"
    k, n = _static(w_dims)
    k_run = _reduction(k, unit)
    if isinstance(k_run, str):
        return k_run
    return lambda bb, kernels: _matmul_call(bb, kernels, unit, x, w, (k, k_run), n, x_dims[:-1] + [n])


def _conv_plan(call, unit: _Unit):
    """How an NHWC conv runs on `unit`: a 1x1 conv of stride 1 unpadded as a matmul over its
    pixels, any other as a conv; or why it does not."""
    from tvm import relax

    x, w = call.args
    attrs = call.attrs
    why = _f32_why(call, x, w)
    if why:
        return why
    if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NHWC", "HWIO", "NHWC"):
        return "a conv in another layout than NHWC"
    if int(attrs.groups) != 1:
        return "a grouped or depthwise conv"
    x_dims, w_dims = _shape(x), _static(_shape(w) or [None])
    if w_dims is None or x_dims is None or _static(x_dims[1:]) is None:
        return "a conv of symbolic image or window size"
    kh, kw, k, n = w_dims
    k_run = _reduction(k, unit)
    if isinstance(k_run, str):
        return k_run
    strides, padding = [int(s) for s in attrs.strides], [int(p) for p in attrs.padding]
    if (kh, kw) == (1, 1) and strides == [1, 1] and padding == [0, 0, 0, 0]:
        out_dims = x_dims[:-1] + [n]
        w = relax.op.reshape(w, [k, n])
        return lambda bb, kernels: _matmul_call(bb, kernels, unit, x, w, (k, k_run), n, out_dims)
    dilation = [int(d) for d in attrs.dilation]
    return lambda bb, kernels: _conv_call(bb, kernels, unit, x, w, (kh, kw, k, n), k_run, strides, padding, dilation)


def _reduction(k: int, unit: _Unit) -> int | str:
    """The k that `unit`'s kernels run a product of k at: k, or k padded with zeros (in the
    activations and the weights) to whole steps of the unit, where that at most doubles the
    multiplies (AMX: 48 -> 64, 144 -> 160, 16 -> 32; not 8 -> 32: an f32 product of 8 terms
    is cheap); else why the product stays f32."""
    step = unit.kernels.K_STEP
    k_run = -(-k // step) * step
    return k_run if k_run <= 2 * k else f"k = {k}, under half of {unit.name}'s step of {step}"


def _matmul_call(bb, kernels: dict, unit: _Unit, x, w, ks: tuple, n: int, out_dims):
    """x [..., k] · w [k, n] as `unit`'s matmul kernel's call: x rounded to bf16, padded to
    `k_run` (ks = (k, k_run)) and seen as [rows, k_run], w rounded, padded to k_run rows and
    whole column blocks and packed; the result [rows, n] f32 (the kernel writes only the
    columns there are) reshaped."""
    from tvm import relax

    from ...cpu import vnni_layout

    op, emit = relax.op, bb.emit
    k, k_run = ks
    n_padded = vnni_layout.padded_columns(n)
    rows = 1
    for d in out_dims[:-1]:
        rows = rows * d
    a = op.astype(x, "bfloat16")
    if k_run != k:
        a = op.nn.pad(a, [0, 0] * (len(out_dims) - 1) + [0, k_run - k])
    a = emit(op.reshape(a, [rows, k_run]))
    packed = emit(_packed(w, [k, n], k_run, n_padded, [k_run // 2, 2, n_padded // 16, 16], [2, 0, 3, 1]))
    kernel = _kernel(bb, kernels, f"{unit.prefix}_matmul_bf16_{k_run}x{n}",
                     lambda post: unit.kernels.matmul_bf16(k_run, n, post))
    y = emit(relax.call_tir(kernel, [a, packed], relax.TensorType([rows, n], "float32")))
    return op.reshape(y, out_dims)


def _conv_call(bb, kernels: dict, unit: _Unit, x, w, hwio, k_run: int, strides, padding, dilation):
    """An NHWC conv as `unit`'s conv kernel's call: x rounded to bf16 and padded (its image
    by `padding`, its channels to `k_run`), w rounded, padded to k_run input channels and
    whole output-channel blocks and packed; the result f32 (the kernel writes only the
    channels there are)."""
    from tvm import relax

    from ...cpu import vnni_layout

    op, emit = relax.op, bb.emit
    kh, kw, k, n = hwio
    batch, height, width, _ = _shape(x)
    top, left, bottom, right = padding
    height, width = int(height) + top + bottom, int(width) + left + right
    a = op.astype(x, "bfloat16")
    if any(padding) or k_run != k:
        a = op.nn.pad(a, [0, 0, top, bottom, left, right, 0, k_run - k])
    a = emit(a)
    n_padded = vnni_layout.padded_columns(n)
    packed = emit(_packed(w, hwio, k_run, n_padded, [kh, kw, k_run // 2, 2, n_padded // 16, 16], [4, 0, 1, 2, 5, 3]))
    name = (f"{unit.prefix}_conv2d_bf16_{height}x{width}x{k_run}x{n}_{kh}x{kw}"
            f"_s{strides[0]}x{strides[1]}_d{dilation[0]}x{dilation[1]}")
    kernel = _kernel(bb, kernels, name, lambda post: unit.kernels.conv2d_bf16(height, width, k_run, n, (kh, kw),
                                                                              strides, dilation, post))
    out_h = (height - (kh - 1) * dilation[0] - 1) // strides[0] + 1
    out_w = (width - (kw - 1) * dilation[1] - 1) // strides[1] + 1
    return relax.call_tir(kernel, [a, packed], relax.TensorType([batch, out_h, out_w, n], "float32"))


def _packed(w, dims: list, k_run: int, n_padded: int, split: list, order: list):
    """Weights `w` (dims [..., k, n]) rounded to bf16, zero-padded to `k_run` along k and
    `n_padded` along n, then reshaped to `split` and permuted by `order`: the kernels' B order."""
    from tvm import relax

    op = relax.op
    weights = op.astype(w, "bfloat16")
    if (k_run, n_padded) != tuple(dims[-2:]):
        weights = op.nn.pad(weights, [0, 0] * (len(dims) - 2) + [0, k_run - dims[-2], 0, n_padded - dims[-1]])
    return op.permute_dims(op.reshape(weights, split), order)


def _kernel(bb, kernels: dict, name: str, make):
    """The GlobalVar of kernel `name` (`make(post ops)` its PrimFunc) in the module being
    built, added on first use."""
    if name not in kernels:
        kernels[name] = (bb.add_func(make(None).with_attr("global_symbol", name), name), make)
    return kernels[name][0]


def _with_post_ops(mod, makers: dict, report: PrecisionReport):
    """`mod` with the bias add after a bf16 product, and a residual add and a ReLU (ReLU6,
    swish) after that where there are, done by the product's kernel as it writes its results
    (cpu.post_ops): each would be a pass over the product's f32 output in memory. `makers`:
    the bf16 kernels' GlobalVars -> make(post ops). Each value between the product and the last
    op taken must have no other reader; the bias is one value per output column."""
    import tvm
    from tvm import relax
    from tvm.relax.dpl import is_op, rewrite_call, wildcard

    from ...cpu.post_ops import PostOps

    added = {}  # kernel name -> GlobalVar
    mod = relax.transform.CanonicalizeBindings()(mod)  # no `lv1 = lv` between the ops
    product = is_op("relax.call_tir")(wildcard(), wildcard())
    reshaped = is_op("relax.reshape")(product, wildcard())
    core = product | reshaped | is_op("relax.reshape")(reshaped, wildcard())
    bias, residual = wildcard(), wildcard()
    biased = is_op("relax.add")(core, bias) | is_op("relax.add")(bias, core)
    summed = is_op("relax.add")(biased, residual) | is_op("relax.add")(residual, biased)
    top = summed | biased  # the value the activation reads
    relu, clip = is_op("relax.nn.relu")(top), is_op("relax.clip")(top, wildcard(), wildcard())
    sigmoid = is_op("relax.sigmoid")(top)
    swish = is_op("relax.multiply")(top, sigmoid) | is_op("relax.multiply")(sigmoid, top)  # one `top` in both

    for func_gv, func in list(mod.functions.items()):
        if not isinstance(func, relax.Function):
            continue
        def reads(value) -> int:
            return uses.get(var_of.get(value))

        def fused(call, matched):
            p = matched[product]
            gv = p.args[0]
            inner = [matched[x] for x in (product, reshaped, core, biased, summed, sigmoid) if x in matched]
            # each read once, by the next op (swish reads its input twice); the last op's may be read often
            once = [v for v in inner if not v.same_as(call) and not (swish in matched and v.same_as(matched[top]))]
            if gv not in makers or any(reads(v) != 1 for v in once):
                return call
            if swish in matched and reads(matched[top]) != 2:
                return call
            out_ty = p.ty_args[0] if hasattr(p, "ty_args") else p.ty
            n = int(out_ty.shape.values[-1])
            b = var_of.get(matched[bias], matched[bias])
            if _static(_shape(b) or [None]) not in ([n], [1] * (len(_shape(b) or [])  - 1) + [n]):
                return call
            if str(b.ty.dtype) != "float32":
                return call
            activation = ("relu" if relu in matched else "relu6" if clip in matched and _is_relu6(call)
                          else "swish" if swish in matched else None)  # fmt: skip
            if clip in matched and activation is None:
                return call
            args = [*p.args[1].fields, b if len(_shape(b)) == 1 else relax.op.reshape(b, [n])]
            r = None
            if summed in matched:
                r = var_of.get(matched[residual], matched[residual])
                before = matched[biased]
                if str(getattr(r.ty, "dtype", "")) != "float32" or not _same_shape(r, var_of.get(before, before)):
                    return call
                dims = list(out_ty.shape.values)
                args.append(r if len(_shape(r)) == len(dims) else relax.op.reshape(r, dims))
            post = PostOps(residual=r is not None, activation=activation)
            name = gv.name_hint + post.name()
            if name not in added:
                added[name] = builder.add_func(makers[gv](post).with_attr("global_symbol", name), name)
            report.post_ops += 1
            y = relax.call_tir(added[name], args, out_ty)
            return relax.op.reshape(y, list(call.ty.shape.values)) if core in matched and not p.same_as(matched[core]) else y

        builder = relax.BlockBuilder(mod)  # gives the new kernels' GlobalVars their types
        rewritten = func
        for pattern in (relu | clip | swish, summed, biased):  # the longest chains first
            var_of, uses = _bindings(rewritten)  # of this pass's input: a rewrite makes new values
            rewritten = rewrite_call(pattern, fused, rewritten)
        if not rewritten.same_as(func):
            mod = builder.get()
            mod[func_gv] = rewritten
    return mod


def _bindings(func):
    """(bound value -> its variable, variable -> how many times it is read) of `func`."""
    from tvm import relax

    var_of, uses = {}, {}
    for block in func.body.blocks:
        for binding in block.bindings:
            var_of[binding.value] = binding.var
            for v in relax.analysis.free_vars(binding.value):
                uses[v] = uses.get(v, 0) + 1
    for v in relax.analysis.free_vars(func.body.body):
        uses[v] = uses.get(v, 0) + 1
    return var_of, uses


def _is_relu6(clip) -> bool:
    low, high = (float(getattr(a, "value", float("nan"))) for a in clip.args[1:3])
    return (low, high) == (0.0, 6.0)


def _same_shape(a, b) -> bool:
    """Do `a` and `b` have the same dims (symbolic ones the same variable)?"""
    from tvm.sym.analyzer import Analyzer

    x, y = _shape(a), _shape(b)
    if x is None or y is None or len(x) != len(y):
        return False
    analyzer = Analyzer()
    return all(analyzer.can_prove_equal(d, e) for d, e in zip(x, y))


def _is_weight(expr, static: set) -> bool:
    import tvm

    return isinstance(expr, tvm.ir.expr.Constant) or expr in static


def _static(dims) -> list | None:
    from tvm import tirx

    return [int(d.value) for d in dims] if all(isinstance(d, tirx.IntImm) for d in dims) else None


def _shape(expr):
    shape = getattr(expr.ty, "shape", None)
    return list(shape.values) if shape is not None and hasattr(shape, "values") else None


def _f32_why(call, x, w) -> str | None:
    dtypes = {str(getattr(x.ty, "dtype", None)), str(getattr(w.ty, "dtype", None))}
    out = getattr(call.attrs, "out_dtype", None)
    if dtypes != {"float32"} or str(out) not in ("float32", "", "None", "void"):
        return "not f32"
    return None
