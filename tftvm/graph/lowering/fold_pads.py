"""A zero pad of a conv's input folded into the conv's own padding: conv2d(pad(x), w) ->
conv2d(x, w, padding + pads), in NHWC with zeros added along height and width only.

Keras writes a strided conv as ZeroPadding2D then Conv2D or DepthwiseConv2D with "valid"
padding (MobileNetV2's stride-2 blocks, ResNet50's first conv). As ops of their own, FuseOps
puts the pad into the kernel before it, after the activation: that kernel then writes the
padded copy in a pass of its own instead of each tile as it is computed, and the depthwise
conv reads that copy. Folded, the conv pads as it reads (schedule/inline.inline_padding for a
depthwise conv), and the activation is the epilogue of the conv before it.
"""
from __future__ import annotations


def fold(mod):
    """`mod` with each conv2d whose input is a constant zero pad along H and W (NHWC) reading
    the unpadded input with that pad added to its own; a pad nothing else reads goes. `mod`'s
    bindings are canonical (no `lv1 = lv` between the pad and the conv)."""
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

    rewritten = {gv: rewrite_call(pattern, folded, func) for gv, func in mod.functions.items()
                 if isinstance(func, relax.Function)}  # fmt: skip
    changed = {gv: func for gv, func in rewritten.items() if not func.same_as(mod[gv])}
    if not changed:
        return mod
    return relax.transform.DeadCodeElimination()(tvm.IRModule({**mod.functions, **changed}))


def _spatial_pads(pad_call, conv_attrs) -> list[int] | None:
    """The pad's (top, left, bottom, right), in the conv's padding order, where it adds
    constant zeros to an NHWC conv's height and width only; else None."""
    a = pad_call.attrs
    if str(a.pad_mode) != "constant" or float(a.pad_value) != 0.0 or str(conv_attrs.data_layout) != "NHWC":
        return None
    widths = [int(w) for w in a.pad_width]
    if len(widths) != 8 or any(w < 0 for w in widths) or any(widths[i] for i in (0, 1, 6, 7)):
        return None
    return [widths[2], widths[4], widths[3], widths[5]]
