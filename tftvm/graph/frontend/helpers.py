"""What converters share: Relax access, static and symbolic dims, shape operands, padding.

Public for every converter module, tftvm's own (frontend/ops/) and a user's.
"""
from __future__ import annotations

import numpy as np

from .registry import ShapeValue, Unsupported


def relax():
    """The `tvm.relax` module, imported when a converter first runs (tftvm imports fast)."""
    from tvm import relax as module

    return module


def dims_equal(a, b) -> bool:
    """Whether two shapes are provably the same (equal static dims, the same symbols)."""
    from tvm.sym.analyzer import Analyzer

    analyzer = Analyzer()
    return len(a) == len(b) and all(analyzer.can_prove_equal(x, y) for x, y in zip(a, b))


def simplify(dim):
    """(n * 320) // 320 -> n: simple dims keep kernels free of scalar shape parameters."""
    if isinstance(dim, int):
        return dim
    from tvm.sym.analyzer import Analyzer

    return Analyzer().simplify(dim)


def product(dims):
    """The product of `dims` (ints or symbolic dims): a shape's element count."""
    total = 1
    for d in dims:
        total = total * d
    return total


def shape_operand(ctx, node, index, value) -> ShapeValue:
    """A shape-valued input: a ShapeValue already, or a constant int tensor."""
    if isinstance(value, ShapeValue):
        return value
    c = np.asarray(ctx.constant(node, index))
    return ShapeValue([int(v) for v in c.reshape(-1)], scalar=c.ndim == 0)


def static_dims(x, what: str, axes=None) -> list:
    """The dims of `x` as ints; those in `axes` (default: all) must be static."""
    from tvm import tirx

    shape = list(x.ty.shape)
    axes = range(len(shape)) if axes is None else axes
    for a in axes:
        if not isinstance(shape[a], tirx.IntImm):
            raise Unsupported(f"{what} needs static dims {list(axes)}, got {shape}")
    return [int(d.value) if isinstance(d, tirx.IntImm) else None for d in shape]


def checked_axis(node, axis: int, rank: int) -> int:
    """`axis` counted from 0; one outside [-rank, rank) is Unsupported (TF raises for it)."""
    if not -rank <= axis < rank:
        raise Unsupported(f"{node.op} along axis {axis} of a rank-{rank} input (TF raises)")
    return axis % rank


def nhwc_only(ctx, node) -> None:
    """Unsupported unless the node's data_format is NHWC (TF's default, and what the
    converters' layouts assume)."""
    if ctx.attr(node, "data_format", "NHWC") != "NHWC":
        raise Unsupported(f"{node.op} with data_format {ctx.attr(node, 'data_format')}")


def same_padding(size: int, k: int, s: int, d: int) -> tuple[int, int]:
    """TF's SAME padding (before, after) of one spatial dim of a window over `size`: the
    output has ceil(size / s) positions, the odd element of padding goes after."""
    total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


def window_pads(ctx, node, sizes, window, strides, dilations) -> list[tuple[int, int]]:
    """(before, after) per spatial dim for the node's SAME / VALID / EXPLICIT padding;
    `sizes` (the input's spatial dims) are read for SAME only."""
    padding = ctx.attr(node, "padding")
    if padding == "VALID":
        return [(0, 0)] * len(window)
    if padding == "EXPLICIT":
        p = [int(v) for v in ctx.attr(node, "explicit_paddings")]
        return [(p[2 * i + 2], p[2 * i + 3]) for i in range(len(window))]
    return [same_padding(*dim) for dim in zip(sizes, window, strides, dilations)]


def libm(name: str, dtype: str, value):
    """A call to libm's `name` (its float32 form, `name` + "f", for float32 and narrower
    floats, whose value is widened first and the result narrowed, as TF's Eigen does)."""
    from tvm import tirx

    wide = "float64" if dtype == "float64" else "float32"
    result = tirx.call_pure_extern(wide, name + ("f" if wide == "float32" else ""), tirx.Cast(wide, value))
    return tirx.Cast(dtype, result) if wide != dtype else result
