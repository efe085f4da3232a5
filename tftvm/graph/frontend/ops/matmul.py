"""Converters for TF's products: MatMul, BatchMatMul and Einsum. A decode step's attention
(one query row against a cache of keys, Keras' transposes and grouped-query repeats of the
cache around it) becomes one einsum that reads the cache where it is."""
from __future__ import annotations

from tvm import relax

from ..helpers import dims_equal
from ..registry import register_converter, same_dims


@register_converter("Einsum")
def _einsum(ctx, node, *operands):
    equation = ctx.attr(node, "equation")
    return relax.op.einsum(list(operands), equation)


@register_converter("MatMul")
def _matmul(ctx, node, a, b):
    op = relax.op
    transpose_a, transpose_b = ctx.attr(node, "transpose_a", False), ctx.attr(node, "transpose_b", False)
    if transpose_b and not transpose_a and _rows_by_rows(a, b):
        return op.einsum([a, b], "ik,jk->ij")
    if transpose_a:
        a = op.permute_dims(a, [1, 0])
    if transpose_b:
        b = op.permute_dims(b, [1, 0])
    return op.matmul(a, b)


def _rows_by_rows(a, b) -> bool:
    """Whether A·Bᵀ runs as dot products of rows (one einsum kernel; the default schedule
    gives it rfactor vectors) rather than as a transpose of B then a matmul (register tiles
    of whole vectors of B's rows): where B is computed (a constant's transpose is folded), the
    batch dims are the same and the dots are long or the columns do not tile: a transpose
    whose inner axis (the keys) is no whole number of vectors does not vectorize, and long
    dots amortize the sum across lanes; a short dot over a whole number of vectors of keys
    keeps the matmul's register tiles (benchmarks/HISTORY.md has the measurements)."""
    from tvm import tirx
    from tvm.ir.expr import Constant

    from ....schedule import vector_lanes

    if isinstance(b, Constant) or not dims_equal(list(a.ty.shape)[:-2], list(b.ty.shape)[:-2]):
        return False
    depth, cols = b.ty.shape[-1], b.ty.shape[-2]
    lanes = vector_lanes(str(b.ty.dtype))
    long_dots = isinstance(depth, tirx.IntImm) and int(depth) >= 8 * lanes
    return long_dots or not (isinstance(cols, tirx.IntImm) and int(cols) % lanes == 0)


@register_converter("BatchMatMulV2", "BatchMatMulV3")
def _batch_matmul(ctx, node, a, b):
    op = relax.op

    def swap_last(t):
        n = len(t.ty.shape)
        return op.permute_dims(t, list(range(n - 2)) + [n - 1, n - 2])

    a, b = same_dims(ctx, [a, b], skip=(-1, -2))  # the batch dims
    adj_x, adj_y = ctx.attr(node, "adj_x", False), ctx.attr(node, "adj_y", False)
    if not adj_x and not adj_y and (_one_column(a, b) or _one_row_by_a_transpose(ctx, a, b)):
        return _einsum_through_transposes(ctx, a, b)
    if adj_y and not adj_x and _rows_by_rows(a, b):
        batch = "abcdefgh"[: len(a.ty.shape) - 2]
        return op.einsum([a, b], f"{batch}ik,{batch}jk->{batch}ij")
    if adj_x:
        a = swap_last(a)
    if adj_y:
        b = swap_last(b)
    return op.matmul(a, b)


def _one_column(a, b) -> bool:
    """Whether A·B has one static column and several rows, over the same batch dims:
    attention's scores in a decode step as Keras writes them, K·qᵀ, [..., keys, depth] by
    [..., depth, 1]."""
    from tvm import tirx

    rows, cols = a.ty.shape[-2], b.ty.shape[-1]
    return (len(a.ty.shape) == len(b.ty.shape) >= 2 and dims_equal(list(a.ty.shape)[:-2], list(b.ty.shape)[:-2])
            and isinstance(cols, tirx.IntImm) and int(cols) == 1
            and not (isinstance(rows, tirx.IntImm) and int(rows) == 1))  # fmt: skip


def _one_row_by_a_transpose(ctx, a, b) -> bool:
    """Whether A·B has one static row and B is a transpose, over the same batch dims:
    attention's probabilities times the values in a decode step, which Keras transposes."""
    from tvm import tirx

    rows = a.ty.shape[-2]
    return (len(a.ty.shape) == len(b.ty.shape) >= 3 and dims_equal(list(a.ty.shape)[:-2], list(b.ty.shape)[:-2])
            and isinstance(rows, tirx.IntImm) and int(rows) == 1
            and _transpose_making(ctx, b) is not None)  # fmt: skip


def _einsum_through_transposes(ctx, a, b):
    """A·B as one einsum over the tensors before the transposes that made A or B (Keras
    transposes a decode step's key and value caches for each layer, a copy of the cache per
    layer and step), so that the transposes are not written out. With one column it runs as
    dot products of A's rows with it (the default schedule's rule for a reduction along the
    last axis), where a matmul's register tiles, a vector of columns wide, would run scalar;
    with one row as register tiles over B's columns, read where they are. A cache repeated
    for grouped-query attention (tf.repeat: ExpandDims, Tile, Reshape) is read where it is
    too: its head axis splits into (key head, query head of its group) in the other operand
    and the result, which are reshaped to that split and back (free)."""
    letters = "abcdefghijklmnopqrstuvw"
    n = len(a.ty.shape)
    batch, i, k, j = letters[: n - 2], "x", "y", "z"
    operands = [_before_transpose(ctx, a, batch + i + k), _before_transpose(ctx, b, batch + k + j)]
    result = batch + i + j
    for index, (tensor, subscripts) in enumerate(operands):
        repeat = _repeat_making(ctx, tensor)
        other_tensor, other = operands[1 - index]
        if repeat is None or subscripts[repeat[1]] not in other or subscripts[repeat[1]] not in result:
            continue
        source, axis, times = repeat
        letter = subscripts[axis]
        operands[index] = (source, subscripts.replace(letter, "G"))
        groups = int(source.ty.shape[axis])
        operands[1 - index] = (_split_axis(other_tensor, other.index(letter), groups, times), other.replace(letter, "GR"))
        product = relax.op.einsum([t for t, _ in operands], f"{operands[0][1]},{operands[1][1]}->"
                                                            f"{result.replace(letter, 'GR')}")  # fmt: skip
        return relax.op.reshape(product, [*list(a.ty.shape)[:-1], b.ty.shape[-1]])
    return relax.op.einsum([t for t, _ in operands], f"{operands[0][1]},{operands[1][1]}->{result}")


def _split_axis(tensor, axis: int, outer: int, inner: int):
    """`tensor` reshaped with `axis` (outer x inner long) split into (outer, inner)."""
    shape = list(tensor.ty.shape)
    return relax.op.reshape(tensor, [*shape[:axis], outer, inner, *shape[axis + 1:]])


def _repeat_making(ctx, value):
    """(x, axis, times) where `value` is x repeated `times` along `axis`, each element
    `times` over in a row (tf.repeat: x expanded at axis + 1, tiled there, the two axes
    merged), else None."""
    from tvm import tirx

    merged = _bound_call(ctx, value, "relax.reshape")
    tiled = _bound_call(ctx, merged.args[0], "relax.tile") if merged is not None else None
    expanded = _bound_call(ctx, tiled.args[0], "relax.expand_dims") if tiled is not None else None
    if expanded is None or len(expanded.attrs.axis) != 1:
        return None
    source = expanded.args[0]
    axis = int(expanded.attrs.axis[0]) - 1
    repeats = [int(r) for r in tiled.attrs.repeats]
    rank = len(source.ty.shape)
    if not 0 <= axis < rank or len(repeats) != rank + 1 or any(r != 1 for x, r in enumerate(repeats) if x != axis + 1):
        return None
    shape = list(source.ty.shape)
    times, size = repeats[axis + 1], shape[axis]
    if times < 2 or not isinstance(size, tirx.IntImm):
        return None
    want = [*shape[:axis], int(size) * times, *shape[axis + 1:]]
    return (source, axis, times) if dims_equal(list(value.ty.shape), want) else None


def _bound_call(ctx, value, op: str):
    """The call of `op` that `value` is bound to, or None."""
    from tvm.relax import Call, Var

    if not isinstance(value, Var) or ctx.bb is None:
        return None
    try:
        bound = ctx.bb.lookup_binding(value)
    except Exception:  # TVM raises its own error types for a var it has no binding of
        return None
    return bound if isinstance(bound, Call) and getattr(bound.op, "name", "") == op else None


def _transpose_making(ctx, value):
    """The permute_dims call that `value` is bound to, or None."""
    return _bound_call(ctx, value, "relax.permute_dims")


def _before_transpose(ctx, value, subscripts: str):
    """(the tensor a permute_dims made `value` from, its einsum subscripts), or `value` and
    `subscripts` where no permute_dims made it."""
    transpose = _transpose_making(ctx, value)
    if transpose is None:
        return value, subscripts
    axes = transpose.attrs.axes
    if axes is None:  # a reversal of every axis
        return transpose.args[0], subscripts[::-1]
    source = [""] * len(subscripts)
    for position, axis in enumerate(axes):
        source[int(axis)] = subscripts[position]
    return transpose.args[0], "".join(source)
