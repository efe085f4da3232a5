"""Converters for TF's shape and layout ops: identities, reshapes, shapes as values, slices,
transposes, padding, concatenation, stacking, filling, tiling and splitting.

Shape values (`ShapeValue`) flow through Shape, StridedSlice, Pack, ConcatV2 and Prod as
Python lists of dims and end in a Reshape or Fill: they never become tensors.
"""
from __future__ import annotations

import numpy as np
from tvm import relax

from ..helpers import checked_axis, product, shape_operand, simplify, static_dims
from ..registry import ShapeValue, Unsupported, register_converter, same_dims


@register_converter("Identity")
def _identity(ctx, node, x):
    return x


@register_converter("IdentityN")
def _identity_n(ctx, node, *xs):
    return list(xs)  # Keras' swish emits it (a custom gradient); inference passes values through


@register_converter("StopGradient", "PreventGradient")
def _stop_gradient(ctx, node, x):
    return x  # inference graphs: no gradient to stop


@register_converter("Reshape")
def _reshape(ctx, node, x, shape):
    if isinstance(x, ShapeValue):  # a scalar dim as a one-dim shape, or back
        size = np.asarray(ctx.constant(node, 1)).reshape(-1)
        if len(x) != 1 or len(size) > 1 or (len(size) == 1 and int(size[0]) not in (1, -1)):
            raise Unsupported(f"Reshape of a shape value of {len(x)} dims to {size.tolist()}")
        return ShapeValue(list(x), scalar=len(size) == 0)
    dims = shape if isinstance(shape, ShapeValue) else [int(d) for d in ctx.constant(node, 1)]
    if any(isinstance(d, int) and d == -1 for d in dims):
        known = product(d for d in dims if not (isinstance(d, int) and d == -1))
        dims = [product(x.ty.shape) // known if isinstance(d, int) and d == -1 else d for d in dims]
    dims = [simplify(d) for d in dims]
    if any(_is_zero(d) for d in dims):  # Relax's reshape reads a 0 as "the input's dim here"
        return relax.op.zeros(dims, str(x.ty.dtype))  # no elements: nothing to move
    return relax.op.reshape(x, dims)


def _is_zero(dim) -> bool:
    from tvm import tirx

    return isinstance(dim, (int, tirx.IntImm)) and int(dim) == 0


@register_converter("Shape")
def _shape(ctx, node, x):
    return ShapeValue(list(x.ty.shape))


@register_converter("Size")
def _size(ctx, node, x):
    return ShapeValue([simplify(product(x.ty.shape))], scalar=True)


@register_converter("StridedSlice", constant_inputs=(1, 2, 3))
def _strided_slice(ctx, node, x, begin, end, strides):
    begin, end, strides = (np.asarray(ctx.constant(node, i)).reshape(-1) for i in (1, 2, 3))
    masks = {m: int(ctx.attr(node, m, 0)) for m in
             ("begin_mask", "end_mask", "shrink_axis_mask", "ellipsis_mask", "new_axis_mask")}  # fmt: skip
    if isinstance(x, ShapeValue):
        if masks["ellipsis_mask"] or masks["new_axis_mask"] or len(begin) != 1:
            raise Unsupported("StridedSlice of a shape with more than one axis, an ellipsis or a new axis")
        if masks["shrink_axis_mask"] & 1:
            return ShapeValue([x[int(begin[0])]], scalar=True)
        b = None if masks["begin_mask"] & 1 else int(begin[0])
        e = None if masks["end_mask"] & 1 else int(end[0])
        return ShapeValue(x[b:e:int(strides[0])])
    shape = list(x.ty.shape)
    axes, b_out, e_out, s_out, out_dims = [], [], [], [], []  # out_dims: (input axis or None for a new axis)
    axis = 0
    for i in range(len(begin)):
        if masks["ellipsis_mask"] >> i & 1:  # every axis the entries after it do not name
            named = sum(1 for j in range(i + 1, len(begin)) if not (masks["new_axis_mask"] >> j & 1))
            for a in range(axis, len(shape) - named):
                out_dims.append(a)
            axis = len(shape) - named
            continue
        if masks["new_axis_mask"] >> i & 1:
            out_dims.append(None)
            continue
        if axis >= len(shape):
            raise Unsupported(f"StridedSlice names axis {axis} of a rank-{len(shape)} tensor")
        dim, stride = shape[axis], int(strides[i])
        if masks["shrink_axis_mask"] >> i & 1:  # one index, whatever the stride
            b = int(begin[i])
            e, stride = b + 1 if b != -1 else dim, 1
        else:  # a masked bound is the first or last element in the stride's direction
            b = (0 if stride > 0 else -1) if masks["begin_mask"] >> i & 1 else int(begin[i])
            e = (dim if stride > 0 else -(1 << 62)) if masks["end_mask"] >> i & 1 else int(end[i])
            out_dims.append(axis)
        axes.append(axis), b_out.append(b), e_out.append(e), s_out.append(stride)
        axis += 1
    out_dims += range(axis, len(shape))  # axes after the last entry are taken whole
    # Every axis whole, in steps (x[..., ::2]): the bounds are in range, and saying so keeps
    # TOPI's negative-bound select out of the result's shape (a step of a symbolic dim that is
    # a step already gave if_then_else(d < -1, ...), which no kernel signature takes).
    whole = all(b == 0 and e is shape[a] and s > 0 for a, b, e, s in zip(axes, b_out, e_out, s_out))
    out = relax.op.strided_slice(x, axes, b_out, e_out, s_out, assume_inbound=whole) if axes else x
    if out_dims == list(range(len(shape))):
        return out
    # Shrunk axes dropped and new axes of 1 put in: a reshape of the slice, a free view.
    sliced = ctx.bb.normalize(out).ty.shape
    return relax.op.reshape(out, [1 if a is None else sliced[a] for a in out_dims])


@register_converter("Transpose", constant_inputs=(1,))
def _transpose(ctx, node, x, perm):
    return relax.op.permute_dims(x, [int(p) for p in ctx.constant(node, 1)])


@register_converter("ExpandDims", constant_inputs=(1,))
def _expand_dims(ctx, node, x, axis):
    if isinstance(x, ShapeValue):  # a scalar dim made a one-dim shape (to concatenate it)
        if not x.scalar or int(ctx.constant(node, 1)) not in (0, -1):
            raise Unsupported("ExpandDims of a shape value other than a scalar dim")
        return ShapeValue(list(x))
    return relax.op.expand_dims(x, int(ctx.constant(node, 1)))


@register_converter("Squeeze")
def _squeeze(ctx, node, x):
    dims = ctx.attr(node, "squeeze_dims") or None
    return relax.op.squeeze(x, axis=[int(d) for d in dims] if dims else None)


@register_converter("Pad", constant_inputs=(1,))
@register_converter("PadV2", constant_inputs=(1, 2))
def _pad(ctx, node, x, paddings, *value):
    pads = [int(p) for p in np.asarray(ctx.constant(node, 1)).reshape(-1)]
    fill = float(ctx.constant(node, 2)) if node.op == "PadV2" else 0.0
    return relax.op.nn.pad(x, pads, pad_value=fill)


@register_converter("ConcatV2", constant_inputs=(-1,))
def _concat(ctx, node, *args):
    axis = int(ctx.constant(node, len(args) - 1))
    if any(isinstance(a, ShapeValue) for a in args[:-1]):
        dims = []
        for i, a in enumerate(args[:-1]):
            dims += shape_operand(ctx, node, i, a)
        return ShapeValue(dims)
    rank = len(args[0].ty.shape)
    return relax.op.concat(same_dims(ctx, list(args[:-1]), skip=(axis % rank - rank,)), axis=axis)


@register_converter("Pack")
def _pack(ctx, node, *args):
    if any(isinstance(a, ShapeValue) for a in args):
        dims = []
        for i, a in enumerate(args):
            dims += shape_operand(ctx, node, i, a)
        return ShapeValue(dims)
    return relax.op.stack(same_dims(ctx, list(args)), axis=int(ctx.attr(node, "axis", 0)))



@register_converter("Fill")
def _fill(ctx, node, dims, value):
    dims = shape_operand(ctx, node, 0, dims)
    return relax.op.full([simplify(d) for d in dims], value, ctx.attr(node, "T"))


@register_converter("Tile", constant_inputs=(1,))
def _tile(ctx, node, x, multiples):
    return relax.op.tile(x, [int(m) for m in np.asarray(ctx.constant(node, 1)).reshape(-1)])


@register_converter("Slice", constant_inputs=(1, 2))
def _slice(ctx, node, x, begin, size):
    begin = [int(b) for b in np.asarray(ctx.constant(node, 1)).reshape(-1)]
    size = [int(s) for s in np.asarray(ctx.constant(node, 2)).reshape(-1)]
    shape = list(x.ty.shape)
    end = [shape[a] if s == -1 else b + s for a, (b, s) in enumerate(zip(begin, size))]
    return relax.op.strided_slice(x, list(range(len(begin))), begin, end)


def _split_outputs(x, sizes, axis):
    """A list of Relax values, one per piece of `x` along `axis` (sizes may hold one -1)."""
    axis = axis % len(x.ty.shape)
    if -1 in sizes:
        from tvm import tirx

        dim = x.ty.shape[axis]
        if not isinstance(dim, tirx.IntImm):
            raise Unsupported("SplitV with -1 along a symbolic dim")
        sizes = [int(dim.value) - (sum(sizes) + 1) if s == -1 else s for s in sizes]
    bounds = list(np.cumsum(sizes)[:-1].astype(int))
    return [relax.op.strided_slice(x, [axis], [int(b)], [int(e)])
            for b, e in zip([0] + bounds, bounds + [int(sum(sizes))])]  # fmt: skip


@register_converter("Split", constant_inputs=(0,))
def _split(ctx, node, axis, x):
    axis = int(ctx.constant(node, 0))
    n = int(ctx.attr(node, "num_split"))
    (dim,) = [static_dims(x, "Split", (axis % len(x.ty.shape),))[axis]]
    return _split_outputs(x, [dim // n] * n, axis)


@register_converter("SplitV", constant_inputs=(1, 2))
def _split_v(ctx, node, x, sizes, axis):
    sizes = [int(s) for s in np.asarray(ctx.constant(node, 1)).reshape(-1)]
    return _split_outputs(x, sizes, int(ctx.constant(node, 2)))


@register_converter("ReverseV2", constant_inputs=(1,))
def _reverse(ctx, node, x, axis):
    rank = len(x.ty.shape)
    for a in sorted({checked_axis(node, int(a), rank) for a in np.atleast_1d(ctx.constant(node, 1))}):
        x = ctx.bb.emit(relax.op.flip(x, a))
    return x


@register_converter("Roll", constant_inputs=(1, 2))
def _roll(ctx, node, x, shift, axis):
    """out[.., i, ..] = x[.., (i - shift) mod n, ..]: shifts along one axis add up, and a
    dim of 0 has no element to read (an index kernel, so symbolic dims roll too)."""
    from tvm import te, tirx

    rank = len(x.ty.shape)
    shifts, axes = np.broadcast_arrays(np.asarray(ctx.constant(node, 1)), np.asarray(ctx.constant(node, 2)))
    total = {}
    for s, a in zip(shifts.reshape(-1), axes.reshape(-1)):
        a = checked_axis(node, int(a), rank)
        total[a] = total.get(a, 0) + int(s)

    def kernel(t):
        def at(*i):
            index = list(i)
            for a, s in total.items():
                index[a] = tirx.floormod(i[a] - s, t.shape[a])
            return t[tuple(index)]

        return te.compute(t.shape, at, name="roll")

    return ctx.bb.call_te(kernel, x) if total else x
