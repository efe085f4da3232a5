"""Converters for TF's spatial ops: transposed and 3-D convs, resizes, block rearrangements, mirror pads,
morphological dilation and crop-and-resize."""
from __future__ import annotations

import numpy as np

from tvm import relax

from ..helpers import nhwc_only, shape_operand, static_dims, window_pads
from ..registry import Unsupported, register_converter


def _ints(dims, what: str) -> list[int]:
    """Shape-value dims as ints; a symbolic one is refused."""
    from tvm import tirx

    if not all(isinstance(d, (int, tirx.IntImm)) for d in dims):
        raise Unsupported(f"{what} must be static, got {list(dims)}")
    return [int(d) for d in dims]


@register_converter("Conv2DBackpropInput")
def _conv2d_backprop_input(ctx, node, sizes, w, dy):
    nhwc_only(ctx, node)
    if any(d != 1 for d in ctx.attr(node, "dilations") or [1]):
        raise Unsupported("Conv2DBackpropInput with dilations (TF's CPU kernel rejects them too)")
    out_h, out_w, out_c = _ints(shape_operand(ctx, node, 0, sizes)[1:], "Conv2DBackpropInput output H, W, C")
    kh, kw, cout, cin = static_dims(w, "Conv2DBackpropInput filter")
    in_h, in_w, in_c = static_dims(dy, "Conv2DBackpropInput", (1, 2, 3))[1:]
    if (cout, cin) != (out_c, in_c):
        raise Unsupported(f"grouped Conv2DBackpropInput (filter {[kh, kw, cout, cin]}, channels {out_c}, {in_c})")
    strides = ctx.attr(node, "strides")[1:3]
    pads = window_pads(ctx, node, (out_h, out_w), (kh, kw), strides, (1, 1))
    # The transposed conv is the forward conv's full gradient (size (in - 1) * s + k), cropped to
    # the output: `before` at the start, the rest at the end, or output_padding when that is short.
    crops, extra = [], []
    for out, inp, k, s, (before, after) in zip((out_h, out_w), (in_h, in_w), (kh, kw), strides, pads):
        if (out + before + after - k) // s + 1 != inp:
            raise Unsupported(f"Conv2DBackpropInput: output size {out} does not give input size {inp}")
        end = (inp - 1) * s + k - before - out
        if not (0 <= before < k and end < k):
            raise Unsupported(f"Conv2DBackpropInput with padding {(before, after)} past the filter size {k}")
        crops.append((before, max(end, 0)))
        extra.append(max(-end, 0))
    op = relax.op
    # TOPI lowers only NCHW data with an IOHW kernel; TF's filter is (h, w, out, in).
    y = op.nn.conv2d_transpose(op.permute_dims(dy, [0, 3, 1, 2]), op.permute_dims(w, [3, 2, 0, 1]),
                               strides=strides, padding=(crops[0][0], crops[1][0], crops[0][1], crops[1][1]),
                               output_padding=extra, data_layout="NCHW", kernel_layout="IOHW")  # fmt: skip
    return op.permute_dims(y, [0, 2, 3, 1])


@register_converter("Conv3D")
def _conv3d(ctx, node, x, w):
    if ctx.attr(node, "data_format", "NDHWC") != "NDHWC":
        raise Unsupported(f"Conv3D with data_format {ctx.attr(node, 'data_format')}")
    strides, dil = ctx.attr(node, "strides")[1:4], (ctx.attr(node, "dilations") or [1] * 5)[1:4]
    kd, kh, kw, cin, _ = static_dims(w, "Conv3D filter")
    dims = static_dims(x, "Conv3D", (1, 2, 3, 4))
    if dims[4] != cin:
        raise Unsupported(f"grouped Conv3D (input channels {dims[4]}, filter channels {cin})")
    pads = window_pads(ctx, node, dims[1:4], (kd, kh, kw), strides, dil)
    return relax.op.nn.conv3d(x, w, strides=strides, padding=[p[0] for p in pads] + [p[1] for p in pads],
                                 dilation=dil, data_layout="NDHWC", kernel_layout="DHWIO")  # fmt: skip


def _resize_size(ctx, node, x, size) -> tuple[list[int], list[int]]:
    """(input H, W), (output H, W) of a resize, all static."""
    out = _ints(shape_operand(ctx, node, 1, size), f"{node.op} size")
    return static_dims(x, node.op, (1, 2))[1:3], out


def _resize_flags(ctx, node) -> tuple[bool, bool]:
    align, half = bool(ctx.attr(node, "align_corners", False)), bool(ctx.attr(node, "half_pixel_centers", False))
    if align and half:  # TF rejects this pair at run time
        raise Unsupported(f"{node.op} with both align_corners and half_pixel_centers")
    return align, half


@register_converter("ResizeBilinear")
def _resize_bilinear(ctx, node, x, size):
    align, half = _resize_flags(ctx, node)
    _, out = _resize_size(ctx, node, x, size)
    mode = "align_corners" if align else "half_pixel" if half else "asymmetric"
    op = relax.op
    # TF's output is float32 whatever the input; its taps are read as float.
    x = op.astype(x, "float32")
    # align_corners divides by size - 1; for a size of 1 TF takes pixel 0, the first of a size of 2.
    padded = [max(o, 2) if align else o for o in out]
    y = op.image.resize2d(x, padded, layout="NHWC", method="linear", coordinate_transformation_mode=mode)
    return y if padded == out else op.strided_slice(y, [1, 2], [0, 0], out)


def _nearest_indices(in_size: int, out_size: int, align: bool, half: bool) -> np.ndarray:
    """The source index of each output index, computed in float32 exactly as TF's kernel does."""
    f32 = np.float32
    scale = f32(in_size - 1) / f32(out_size - 1) if align and out_size > 1 else f32(in_size) / f32(out_size)
    pos = (np.arange(out_size, dtype=f32) + f32(0.5 if half else 0)) * scale
    # roundf rounds halves away from zero; float64 makes `+ 0.5` exact.
    idx = np.trunc(pos.astype(np.float64) + 0.5) if align else np.floor(pos)
    return np.clip(idx, 0, in_size - 1).astype("int64")


@register_converter("ResizeNearestNeighbor")
def _resize_nearest(ctx, node, x, size):
    align, half = _resize_flags(ctx, node)
    (in_h, in_w), (out_h, out_w) = _resize_size(ctx, node, x, size)
    # A gather with TF's own indices: TOPI's nearest resize floors with an epsilon and rounds
    # halves to even, so it can pick a different pixel than TF at exact ties.
    rows = relax.op.take(x, relax.const(_nearest_indices(in_h, out_h, align, half)), axis=1)
    return relax.op.take(rows, relax.const(_nearest_indices(in_w, out_w, align, half)), axis=2)


def _block_args(ctx, node, x) -> tuple[list[int], list[tuple[int, int]], list]:
    """Block shape, (before, after) pads or crops, and the dims of `x` with static spatial dims."""
    block = [int(b) for b in np.asarray(ctx.constant(node, 1)).reshape(-1)]
    pairs = np.asarray(ctx.constant(node, 2)).reshape(-1, 2).tolist()
    spatial = range(1, 1 + len(block))
    known = static_dims(x, node.op, spatial)
    dims = [known[a] if a in spatial else d for a, d in enumerate(x.ty.shape)]
    return block, [(int(a), int(b)) for a, b in pairs], dims


@register_converter("SpaceToBatchND")
def _space_to_batch(ctx, node, x, block_shape, paddings):
    block, pads, dims = _block_args(ctx, node, x)
    m, op = len(block), relax.op
    padded = [dims[1 + i] + sum(pads[i]) for i in range(m)]  # TF's shape check: divisible by block
    rest = dims[1 + m:]
    x = op.nn.pad(x, [0, 0] + [p for pair in pads for p in pair] + [0, 0] * len(rest))
    outer = [p // b for p, b in zip(padded, block)]
    split = [dims[0]] + [d for o, b in zip(outer, block) for d in (o, b)] + rest
    # (B, h/b, b, w/b, b, C) -> (b, b, B, h/b, w/b, C): block offsets become the outer batch.
    perm = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)] + list(range(1 + 2 * m, len(split)))
    batch = dims[0] * int(np.prod(block))
    return op.reshape(op.permute_dims(op.reshape(x, split), perm), [batch] + outer + rest)


@register_converter("BatchToSpaceND")
def _batch_to_space(ctx, node, x, block_shape, crops):
    block, crops, dims = _block_args(ctx, node, x)
    m, op = len(block), relax.op
    rest = dims[1 + m:]
    batch = dims[0] // int(np.prod(block))
    split = block + [batch] + dims[1:]
    # (b, b, B, h, w, C) -> (B, h, b, w, b, C): the inverse of SpaceToBatchND's rearrangement.
    perm = [m] + [a for i in range(m) for a in (m + 1 + i, i)] + list(range(2 * m + 1, len(split)))
    full = [dims[1 + i] * b for i, b in enumerate(block)]
    y = op.reshape(op.permute_dims(op.reshape(x, split), perm), [batch] + full + rest)
    axes = list(range(1, m + 1))
    return op.strided_slice(y, axes, [c[0] for c in crops], [f - c[1] for f, c in zip(full, crops)])


@register_converter("DepthToSpace")
def _depth_to_space(ctx, node, x):
    nhwc_only(ctx, node)
    b, op = int(ctx.attr(node, "block_size")), relax.op
    n, h, w = list(x.ty.shape)[:3]
    c = static_dims(x, "DepthToSpace", (3,))[3]
    # TF's depth index is (row offset * b + column offset) * C' + c: DCR order.
    y = op.permute_dims(op.reshape(x, [n, h, w, b, b, c // (b * b)]), [0, 1, 3, 2, 4, 5])
    return op.reshape(y, [n, h * b, w * b, c // (b * b)])


@register_converter("SpaceToDepth")
def _space_to_depth(ctx, node, x):
    nhwc_only(ctx, node)
    b, op = int(ctx.attr(node, "block_size")), relax.op
    n = x.ty.shape[0]
    h, w, c = static_dims(x, "SpaceToDepth", (1, 2, 3))[1:]
    y = op.permute_dims(op.reshape(x, [n, h // b, b, w // b, b, c]), [0, 1, 3, 2, 4, 5])
    return op.reshape(y, [n, h // b, w // b, b * b * c])


@register_converter("MirrorPad", constant_inputs=(1,))
def _mirror_pad(ctx, node, x, paddings):
    mode = ctx.attr(node, "mode")
    if mode not in ("REFLECT", "SYMMETRIC"):
        raise Unsupported(f"MirrorPad mode {mode}")
    skip = 1 if mode == "REFLECT" else 0  # REFLECT leaves the edge out of the mirror
    pads = np.asarray(ctx.constant(node, 1)).reshape(-1, 2).tolist()
    padded = [a for a, p in enumerate(pads) if any(p)]
    dims = static_dims(x, "MirrorPad", padded)
    op = relax.op
    for a in padded:
        (lo, hi), n = pads[a], dims[a]
        if max(lo, hi) > n - skip:  # TF rejects it too
            raise Unsupported(f"MirrorPad {mode} of {(lo, hi)} on a dim of {n}")
        parts = [op.flip(op.strided_slice(x, [a], [skip], [skip + lo]), a)] if lo else []
        parts.append(x)
        parts += [op.flip(op.strided_slice(x, [a], [n - skip - hi], [n - skip]), a)] if hi else []
        x = op.concat(parts, axis=a)
    return x


@register_converter("Dilation2D")
def _dilation2d(ctx, node, x, w):
    """Grayscale morphological dilation: the largest x + w over each (strided, dilated)
    window, as TF's kernel takes it: taps in the padding are skipped, not read as zeros, a
    window with none gives the dtype's lowest value, and a NaN tap is never the largest."""
    from tvm import te, tirx

    strides, rates = ctx.attr(node, "strides")[1:3], ctx.attr(node, "rates")[1:3]
    fh, fw, c = static_dims(w, "Dilation2D filter")
    h, wd = static_dims(x, "Dilation2D", (1, 2))[1:3]
    (top, bottom), (left, right) = window_pads(ctx, node, (h, wd), (fh, fw), strides, rates)
    out_h = (h + top + bottom - (fh - 1) * rates[0] - 1) // strides[0] + 1
    out_w = (wd + left + right - (fw - 1) * rates[1] - 1) // strides[1] + 1
    if min(out_h, out_w) < 1:
        raise Unsupported(f"Dilation2D with an empty output ({out_h}, {out_w}): TF raises")

    def kernel(t, f):
        lowest = te.min_value(t.dtype)
        # Select(value > best, value, best): a NaN value never wins, as TF's `if (val > cur)`.
        largest = te.comm_reducer(lambda best, value: tirx.Select(value > best, value, best), lambda dtype: lowest)
        ry, rx = te.reduce_axis((0, fh), "ry"), te.reduce_axis((0, fw), "rx")

        def at(b, y, x_, ch):
            hy, wx = y * strides[0] + ry * rates[0] - top, x_ * strides[1] + rx * rates[1] - left
            inside = tirx.all(hy >= 0, hy < h, wx >= 0, wx < wd)
            # A tap outside reads nothing and adds `lowest`, which never beats the running
            # best. (Not the reduction's `where=`: TVM 0.27's create_prim_func drops it.)
            tap = tirx.if_then_else(inside, t[b, hy, wx, ch] + f[ry, rx, ch], lowest)
            return largest(tap, axis=[ry, rx])

        return te.compute((t.shape[0], out_h, out_w, c), at, name="dilation2d")

    return ctx.bb.call_te(kernel, x, w)


@register_converter("CropAndResize", constant_inputs=(3,))
def _crop_and_resize(ctx, node, image, boxes, box_index, crop_size):
    """Crop-and-resize in NHWC as TF's CPU kernel computes it, float32 out: a sample's
    position in the image is y1 * (H - 1) + i * (y2 - y1) * (H - 1) / (crop_h - 1) (the box's
    centre for a crop of 1), outside [0, H - 1] the extrapolation value, else bilinear between
    the four pixels around it or the nearest one by roundf (halves away from zero). A box index
    outside the batch raises, as in TF. (TOPI's divides by crop_h - 1 for a crop of 1 and
    rounds the nearest pixel otherwise.)"""
    from .indexing import checked_indices

    size = [int(s) for s in np.asarray(ctx.constant(node, 3)).reshape(-1)]
    if len(size) != 2 or min(size) < 1:
        raise Unsupported(f"CropAndResize crop_size {size} (TF raises)")
    method = ctx.attr(node, "method", "bilinear")
    if method not in ("bilinear", "nearest"):
        raise Unsupported(f"CropAndResize method {method}")
    box_index = checked_indices(ctx, node, box_index, [image.ty.shape[0]], (image, "image"), [0], "box_ind")
    extrapolation = float(ctx.attr(node, "extrapolation_value", 0.0))
    return ctx.bb.call_te(_crop_and_resize_kernel, image, boxes, box_index, size, method, extrapolation,
                          primfunc_name_hint="crop_and_resize")  # fmt: skip


def _crop_and_resize_kernel(image, boxes, box_index, size, method, extrapolation):
    from tvm import te, tirx

    f32 = "float32"
    height, width = image.shape[1], image.shape[2]

    def position(i, lo, hi, extent, crop):  # in TF's float order
        top = tirx.Cast(f32, extent - 1)
        if crop == 1:
            return tirx.const(0.5, f32) * (lo + hi) * top
        scale = (hi - lo) * top / tirx.const(crop - 1, f32)
        return lo * top + tirx.Cast(f32, i) * scale

    def pixel(b, y, x, c):  # clamped: a NaN box must not read outside the image
        def clamp(v, extent):  # v: int64
            return tirx.max(tirx.min(v, tirx.Cast("int64", extent) - 1), tirx.const(0, "int64"))

        return tirx.Cast(f32, image[box_index[b], clamp(y, height), clamp(x, width), c])

    def sample(b, i, j, c):
        in_y = position(i, boxes[b, 0], boxes[b, 2], height, size[0])
        in_x = position(j, boxes[b, 1], boxes[b, 3], width, size[1])
        outside = tirx.any(in_y < 0, in_y > tirx.Cast(f32, height - 1), in_x < 0, in_x > tirx.Cast(f32, width - 1))
        if method == "nearest":
            value = pixel(b, _round_half_up(in_y), _round_half_up(in_x), c)
        else:
            y0, x0 = tirx.floor(in_y), tirx.floor(in_x)
            y_lerp, x_lerp = in_y - y0, in_x - x0
            top_y, left_x = tirx.Cast("int64", y0), tirx.Cast("int64", x0)
            bottom_y, right_x = tirx.Cast("int64", tirx.ceil(in_y)), tirx.Cast("int64", tirx.ceil(in_x))
            top_left, top_right = pixel(b, top_y, left_x, c), pixel(b, top_y, right_x, c)
            bottom_left, bottom_right = pixel(b, bottom_y, left_x, c), pixel(b, bottom_y, right_x, c)
            top = top_left + (top_right - top_left) * x_lerp
            bottom = bottom_left + (bottom_right - bottom_left) * x_lerp
            value = top + (bottom - top) * y_lerp
        return tirx.Select(outside, tirx.const(extrapolation, f32), value)

    return te.compute((boxes.shape[0], size[0], size[1], image.shape[3]), sample, name="crop_and_resize")


def _round_half_up(v):
    """roundf of a position at or above 0 (halves up, as C's roundf rounds them away from 0),
    as an int64 index; TVM's round takes halves to even. v - floor(v) is exact, where
    floor(v + 0.5) would round 0.49999997 up."""
    from tvm import tirx

    low = tirx.floor(v)
    return tirx.Cast("int64", tirx.Select(v - low >= tirx.const(0.5, "float32"), low + 1, low))
