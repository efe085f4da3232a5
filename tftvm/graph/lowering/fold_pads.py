"""A zero pad of a conv's input folded into the conv's own padding: conv2d(pad(x), w) ->
conv2d(x, w, padding + pads), in NHWC with zeros added along height and width only.

Keras writes a strided conv as ZeroPadding2D then Conv2D or DepthwiseConv2D with "valid"
padding (MobileNetV2's stride-2 blocks, ResNet50's first conv). As ops of their own, FuseOps
puts the pad into the kernel before it, after the activation: that kernel then writes the
padded copy in a pass of its own instead of each tile as it is computed, and the depthwise
conv reads that copy. Folded, the conv pads as it reads (schedule/inline.inline_padding for a
depthwise conv), and the activation is the epilogue of the conv before it.

A max pool pads with -inf, not zeros: a zero pad folds into it only where the padded values
cannot be negative (the output of a ReLU, or of a clip from 0: ResNet's ZeroPadding2D before
its first max pool), as every window then holds a real value >= 0, which the zeros would not
exceed.
"""
from __future__ import annotations

from .bindings import readers_and_vars


def fold(mod):
    """`mod` with each conv2d whose input is a constant zero pad along H and W (NHWC) reading
    the unpadded input with that pad added to its own, and each max pool so where the padded
    values cannot be negative; a pad nothing else reads goes. `mod`'s bindings are canonical
    (no `lv1 = lv` between the pad and the conv)."""
    import tvm
    from tvm import relax
    from tvm.relax.dpl import is_op, rewrite_call, wildcard

    data, weight = wildcard(), wildcard()
    pad = is_op("relax.nn.pad")(data)
    pattern = is_op("relax.nn.conv2d")(pad, weight)

    def folded(call, matched):
        pads = _spatial_pads(matched[pad], call.attrs)
        if pads is None:
            return call
        a = call.attrs
        padding = [int(p) + extra for p, extra in zip(a.padding, pads)]
        return relax.op.nn.conv2d(matched[data], call.args[1], a.strides, padding, a.dilation, a.groups,
                                  a.data_layout, a.kernel_layout, a.out_layout, a.out_dtype)  # fmt: skip

    pooled = is_op("relax.nn.max_pool2d")(pad)

    def pool_folded(call, matched):
        a = call.attrs
        pads = _spatial_pads(matched[pad], a, layout="layout")
        if pads is None or not _not_negative(matched[data]):
            return call
        padding = [int(p) + extra for p, extra in zip(a.padding, pads)]
        source = var_of.get(matched[data], matched[data])  # the variable, not a second copy of the value
        return relax.op.nn.max_pool2d(source, a.pool_size, a.strides, padding, a.dilation, a.ceil_mode,
                                      a.count_include_pad, a.layout, a.out_layout)  # fmt: skip

    rewritten = {}
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            convs_folded = rewrite_call(pattern, folded, func)
            var_of = readers_and_vars(convs_folded)[0]
            rewritten[gv] = rewrite_call(pooled, pool_folded, convs_folded)
    changed = {gv: func for gv, func in rewritten.items() if not func.same_as(mod[gv])}
    if not changed:
        return mod
    return relax.transform.DeadCodeElimination()(tvm.IRModule({**mod.functions, **changed}))


def _spatial_pads(pad_call, attrs, layout: str = "data_layout") -> list[int] | None:
    """The pad's (top, left, bottom, right), in a conv's or pool's padding order, where it
    adds constant zeros to its NHWC input's height and width only (`attrs`' `layout`
    attribute names the layout); else None."""
    a = pad_call.attrs
    if str(a.pad_mode) != "constant" or float(a.pad_value) != 0.0 or str(getattr(attrs, layout)) != "NHWC":
        return None
    widths = [int(w) for w in a.pad_width]
    if len(widths) != 8 or any(w < 0 for w in widths) or any(widths[i] for i in (0, 1, 6, 7)):
        return None
    return [widths[2], widths[4], widths[3], widths[5]]


def _not_negative(value) -> bool:
    """Whether `value` (a bound value) is a ReLU's output, or a clip's from 0 or above."""
    name = getattr(getattr(value, "op", None), "name", "")
    if name == "relax.nn.relu":
        return True
    return name == "relax.clip" and float(getattr(value.args[1], "value", -1.0)) >= 0.0
