"""A per-channel scale of a conv's output folded into its weights: conv(x, w) * s -> conv(x, w * s),
and (conv(x, w) + b) * s -> conv(x, w * s) + b * s (a Keras Conv2D's bias before a batch norm).

A frozen graph gets this from grappler (TF's constant folding pushes a constant Mul into the
conv's filter). Under enable() a batch norm's scale, rsqrt(variance + eps) * gamma, comes from
variables, and unfolded the conv's epilogue would multiply every output element by it. Folded,
`w * s` depends on weights alone, which LiftTransformParams moves out of the activation kernels
(program.RelaxProgram).
"""
from __future__ import annotations


def fold(mod, weights: list[int]):
    """`mod` with `conv2d(x, w) * s` rewritten as `conv2d(x, w * s)` where `w` and `s` come from
    constants and the weight params of main alone, `s` is one value per output channel, and
    nothing else reads the conv's output (likewise through an add of a bias). The products are
    found by a relax.dpl pattern; the conditions are checked on each match."""
    import tvm
    from tvm import relax
    from tvm.relax.dpl import is_op, rewrite_call, wildcard

    mod = relax.transform.CanonicalizeBindings()(mod)  # no `lv1 = lv` between conv and multiply
    main = mod["main"]
    static = weight_derived(main, weights)
    var_of, uses = {}, {}  # a bound value -> its variable; a variable -> how many reads it has
    for block in main.body.blocks:
        for binding in block.bindings:
            var_of[binding.value] = binding.var
            for a in _args(binding.value):
                if isinstance(a, relax.Var):
                    uses[a] = uses.get(a, 0) + 1
    for v in _vars(main.body.body):
        uses[v] = uses.get(v, 0) + 1

    data, weight, scale, bias = wildcard(), wildcard(), wildcard(), wildcard()
    conv = is_op("relax.nn.conv2d")(data, weight)
    biased = [is_op("relax.add")(conv, bias), is_op("relax.add")(bias, conv)]
    product = conv | biased[0] | biased[1]
    pattern = is_op("relax.multiply")(product, scale) | is_op("relax.multiply")(scale, product)

    def read_once(value) -> bool:
        return uses.get(var_of.get(value)) == 1

    def folded(call, matched):
        # The matcher hands over bound values, not the variables bound to them: the variables
        # are what `static` holds, and what the rewrite reads (not a second copy of the value).
        c, s, b = matched[conv], var_of.get(matched[scale], matched[scale]), matched.get(bias)
        b = var_of.get(b, b) if b is not None else None
        add = next((matched[p] for p in biased if p in matched), None)
        if b is not None and not (_is_static(b, static) and read_once(add)):
            return call
        if not (read_once(c) and _is_static(c.args[1], static) and _is_static(s, static) and _per_channel(s, c)):
            return call
        if (c.attrs.kernel_layout, c.attrs.out_layout) != ("HWIO", "NHWC"):
            return call
        flat = relax.op.reshape(s, [-1])
        a = c.attrs
        out = relax.op.nn.conv2d(c.args[0], relax.op.multiply(c.args[1], flat), a.strides, a.padding, a.dilation,
                                 a.groups, a.data_layout, a.kernel_layout, a.out_layout, a.out_dtype)  # fmt: skip
        return out if b is None else relax.op.add(out, relax.op.multiply(b, flat))  # (conv + b) * s = conv * s + b * s

    rewritten = rewrite_call(pattern, folded, main)
    if rewritten.same_as(main):
        return mod
    out = tvm.IRModule(dict(mod.functions))
    out["main"] = rewritten
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


def _per_channel(scale, conv) -> bool:
    """Is `scale` one value per output channel of `conv` ([C] or [1, ..., 1, C]), of its dtype?"""
    from tvm import tirx

    shape, out = getattr(scale.ty, "shape", None), conv.ty.shape
    if shape is None or out is None or not 1 <= len(shape) <= 4 or scale.ty.dtype != conv.args[1].ty.dtype:
        return False
    dims = [d for d in shape]
    ints = all(isinstance(d, tirx.IntImm) for d in dims) and isinstance(out[-1], tirx.IntImm)
    return ints and all(int(d) == 1 for d in dims[:-1]) and int(dims[-1]) == int(out[-1])
