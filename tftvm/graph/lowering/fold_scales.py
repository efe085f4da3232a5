"""A per-channel scale of a conv's output folded into its weights: conv(x, w) * s -> conv(x, w * s),
and (conv(x, w) + b) * s -> conv(x, w * s) + b * s (a Keras Conv2D's bias before a batch norm).

A frozen graph gets this from grappler (TF's constant folding pushes a constant Mul into the
conv's filter). Under enable() a batch norm's scale, rsqrt(variance + eps) * gamma, comes from
variables, so the conv's epilogue multiplied every output element by it: MobileNetV2's kernels
ran ~20% slower than frozen. Folded, `w * s` depends on weights alone, which
LiftTransformParams moves out of the activation kernels (program.RelaxProgram).
"""
from __future__ import annotations


def fold(mod, weights: list[int]):
    """`mod` with `conv2d(x, w) * s` rewritten as `conv2d(x, w * s)` where `w` and `s` come from
    constants and the weight params of main alone, `s` is one value per output channel, and
    nothing else reads the conv's output (likewise through an add of a bias)."""
    import tvm
    from tvm import relax

    mod = relax.transform.CanonicalizeBindings()(mod)  # no `lv1 = lv` between conv and multiply
    main = mod["main"]
    static = weight_derived(main, weights)
    bound, uses = {}, {}
    for block in main.body.blocks:
        for binding in block.bindings:
            bound[binding.var] = binding.value
            for a in _args(binding.value):
                if isinstance(a, relax.Var):
                    uses[a] = uses.get(a, 0) + 1
    for v in _vars(main.body.body):
        uses[v] = uses.get(v, 0) + 1
    folds = {}
    for var, value in bound.items():
        scaled = _scaled_conv(value, bound, uses, static)
        if scaled is not None:
            folds[var] = scaled
    if not folds:
        return mod
    mutated = _Folder(mod, folds).visit_expr(main)
    out = tvm.IRModule(dict(mod.functions))
    out["main"] = mutated
    return relax.transform.DeadCodeElimination(["main"])(out)


def weight_derived(func, weights) -> set:
    """The variables of `func` computed from its params at `weights` and constants alone
    (those params included)."""
    from tvm import relax

    static = {p for i, p in enumerate(func.params) if i in weights}
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and all(_is_static(a, static) for a in _args(value)):
                static.add(binding.var)
    return static


def _args(value) -> list:
    from tvm import relax

    if isinstance(value, relax.Call):
        return list(value.args)
    if isinstance(value, relax.Tuple):
        return list(value.fields)
    if isinstance(value, relax.TupleGetItem):
        return [value.tuple_value]
    if isinstance(value, relax.Var):
        return [value]
    return []


def _vars(expr) -> list:
    from tvm import relax

    if isinstance(expr, relax.Var):
        return [expr]
    if isinstance(expr, relax.Tuple):
        return [v for f in expr.fields for v in _vars(f)]
    return []


def _is_static(arg, static) -> bool:
    import tvm
    from tvm import relax

    return (isinstance(arg, relax.Var) and arg in static) or isinstance(arg, (tvm.ir.expr.Constant, relax.ShapeExpr))


def _scaled_conv(value, bound, uses, static):
    """(conv, bias or None, scale) where `value` multiplies a foldable conv (plus a bias) by a
    per-channel scale."""
    from tvm import relax

    if not (_is_op(value, "relax.multiply")):
        return None
    for product, scale in (value.args, value.args[::-1]):
        inner = bound.get(product) if isinstance(product, relax.Var) and uses.get(product) == 1 else None
        bias = None
        if _is_op(inner, "relax.add"):
            for sum_, b in (inner.args, inner.args[::-1]):
                if isinstance(sum_, relax.Var) and uses.get(sum_) == 1 and _is_static(b, static):
                    inner, bias = bound.get(sum_), b
                    break
        if not _is_op(inner, "relax.nn.conv2d"):
            continue
        conv = inner
        if (conv.attrs.kernel_layout, conv.attrs.out_layout) != ("HWIO", "NHWC"):
            continue
        if _is_static(conv.args[1], static) and _is_static(scale, static) and _per_channel(scale, conv):
            return conv, bias, scale
    return None


def _is_op(value, name: str) -> bool:
    from tvm import relax

    return isinstance(value, relax.Call) and getattr(value.op, "name", "") == name


def _per_channel(scale, conv) -> bool:
    """Is `scale` one value per output channel of `conv` ([C] or [1, ..., 1, C]), of its dtype?"""
    from tvm import tirx

    shape, out = getattr(scale.ty, "shape", None), conv.ty.shape
    if shape is None or out is None or not 1 <= len(shape) <= 4 or scale.ty.dtype != conv.args[1].ty.dtype:
        return False
    dims = [d for d in shape]
    ints = all(isinstance(d, tirx.IntImm) for d in dims) and isinstance(out[-1], tirx.IntImm)
    return ints and all(int(d) == 1 for d in dims[:-1]) and int(dims[-1]) == int(out[-1])


def _folder_class():
    from tvm import relax

    @relax.expr_functor.mutator
    class Folder(relax.PyExprMutator):
        def __init__(self, mod, folds):
            super().__init__(mod)
            self.folds = folds

        def visit_var_binding_(self, binding):
            if binding.var not in self.folds:
                return super().visit_var_binding_(binding)
            conv, bias, scale = self.folds[binding.var]
            scale = self.builder_.emit(relax.op.reshape(self.visit_expr(scale), [-1]))
            weights = self.builder_.emit(relax.op.multiply(self.visit_expr(conv.args[1]), scale))
            a = conv.attrs
            folded = relax.op.nn.conv2d(self.visit_expr(conv.args[0]), weights, a.strides, a.padding, a.dilation,
                                        a.groups, a.data_layout, a.kernel_layout, a.out_layout, a.out_dtype)  # fmt: skip
            if bias is not None:  # (conv + b) * s = conv * s + b * s
                folded = relax.op.add(self.builder_.emit(folded),
                                      self.builder_.emit(relax.op.multiply(self.visit_expr(bias), scale)))
            emit = self.builder_.emit if isinstance(binding.var, relax.DataflowVar) else self.builder_.emit_output
            self.set_var_remap(binding.var, emit(folded, name_hint=binding.var.name))

    return Folder


def _Folder(mod, folds):
    return _folder_class()(mod, folds)
