"""Converters for TF's arithmetic: elementwise math, comparisons, matmuls, reductions, casts
and selects."""
from __future__ import annotations

import operator

import numpy as np
from tvm import relax

from ..helpers import dims_equal, product
from ..registry import ShapeValue, Unsupported, register_converter, same_dims, shape_arithmetic, shape_tensor


def _binary(fn_name):
    def convert(ctx, node, x, y):
        return getattr(relax.op, fn_name)(x, y)

    return convert


def _unary(path):
    def convert(ctx, node, x):
        fn = relax.op
        for part in path.split("."):
            fn = getattr(fn, part)
        return fn(x)

    return convert


def _dim_max(a, b):
    from tvm import tirx

    return max(a, b) if isinstance(a, int) and isinstance(b, int) else tirx.max(a, b)


def _dim_min(a, b):
    from tvm import tirx

    return min(a, b) if isinstance(a, int) and isinstance(b, int) else tirx.min(a, b)


# What each op does to two dims of a shape value (shape arithmetic: registry.shape_arithmetic).
ON_DIMS = {"Add": operator.add, "AddV2": operator.add, "Sub": operator.sub, "Mul": operator.mul,
           "Maximum": _dim_max, "Minimum": _dim_min}  # fmt: skip

for _tf, _rx in {"Add": "add", "AddV2": "add", "Sub": "subtract", "Mul": "multiply",
                 "RealDiv": "divide", "Maximum": "maximum", "Minimum": "minimum"}.items():  # fmt: skip
    register_converter(_tf, broadcast=True, on_shapes=ON_DIMS.get(_tf))(_binary(_rx))


@register_converter("Pow", broadcast=True)
def _pow(ctx, node, x, y):
    """A float raised to a constant 2, 3 or 4 (GELU's tanh form cubes its input) as products:
    `power` is a libm call per element, which LLVM neither vectorizes nor shares between the
    copies of it that inlining makes, and it costs GPT-2's decode step more than its MLP's
    matmul. The products round twice or thrice where powf rounds once (an ulp or two); NaN,
    infinities and signed zeros come out as powf gives them."""
    from tvm.ir.expr import Constant

    times = None
    if isinstance(y, Constant) and str(x.ty.dtype).startswith("float"):
        value = y.value.numpy()
        if value.size == 1 and value.ndim <= len(x.ty.shape) and float(value.reshape(())) in (2.0, 3.0, 4.0):
            times = int(value.reshape(()))
    if times is None:
        return relax.op.power(x, y)
    if times == 4:
        square = relax.op.multiply(x, x)
        product = relax.op.multiply(square, square)
    else:
        product = x
        for _ in range(times - 1):
            product = relax.op.multiply(product, x)
    return product  # y has one element and no more dims than x: x's shape, as the power has


for _tf, _rx in {"Greater": "greater", "GreaterEqual": "greater_equal", "Less": "less",
                 "LessEqual": "less_equal", "Equal": "equal", "NotEqual": "not_equal",
                 "LogicalAnd": "logical_and", "LogicalOr": "logical_or"}.items():  # fmt: skip
    register_converter(_tf, broadcast=True)(_binary(_rx))


for _tf, _rx in {"LogicalNot": "logical_not", "Floor": "floor", "Ceil": "ceil", "Sign": "sign",
                 "Sin": "sin", "Cos": "cos", "ZerosLike": "zeros_like",
                 "OnesLike": "ones_like"}.items():  # fmt: skip
    register_converter(_tf)(_unary(_rx))


for _tf, _rx in {"Relu": "nn.relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp",
                 "Log": "log", "Sqrt": "sqrt", "Rsqrt": "rsqrt", "Neg": "negative", "Abs": "abs",
                 "Square": "square", "Erf": "erf"}.items():  # fmt: skip
    register_converter(_tf)(_unary(_rx))


def _floor_dims(op: str):
    def on_dims(a, b):
        from tvm import tirx

        if isinstance(b, int) and b == 0:
            raise Unsupported(f"{op} of a shape value by 0 stays in TF, which reports it")
        if isinstance(a, int) and isinstance(b, int):
            return a // b if op == "FloorDiv" else a % b
        if not isinstance(b, int):
            raise Unsupported(f"{op} of a shape value by a symbolic dim (it may be 0)")
        return tirx.floordiv(a, b) if op == "FloorDiv" else tirx.floormod(a, b)

    return on_dims


@register_converter("FloorDiv", "FloorMod")
def _floor_div(ctx, node, x, y):
    from tvm.ir.expr import Constant

    if isinstance(x, ShapeValue) or isinstance(y, ShapeValue):
        return shape_arithmetic(ctx, node, [x, y], _floor_dims(node.op))
    if "int" in str(y.ty.dtype) and not (isinstance(y, Constant) and np.all(y.value.numpy() != 0)):
        # TF raises "Integer division by zero"; a TVM kernel's idiv traps, and SIGFPE ends the process.
        raise Unsupported("an integer division by a tensor that may hold 0 stays in TF, which reports it")
    x, y = same_dims(ctx, [x, y])
    return {"FloorDiv": relax.op.floor_divide, "FloorMod": relax.op.floor_mod}[node.op](x, y)


@register_converter("Erfc")
def _erfc(ctx, node, x):
    return relax.op.subtract(relax.const(1, ctx.attr(node, "T")), relax.op.erf(x))


@register_converter("Einsum")
def _einsum(ctx, node, *operands):
    equation = ctx.attr(node, "equation")
    return relax.op.einsum(list(operands), equation)


@register_converter("SquaredDifference", broadcast=True)
def _squared_difference(ctx, node, x, y):
    op = relax.op
    return op.square(op.subtract(x, y))


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


def _reduction(fn_name):
    def convert(ctx, node, x, axes):
        axis = [int(a) for a in np.atleast_1d(ctx.constant(node, 1))]
        keepdims = bool(ctx.attr(node, "keep_dims", False))
        return getattr(relax.op, fn_name)(x, axis=axis, keepdims=keepdims)  # max, min: see lowering/nans.py

    return convert


for _tf, _rx in {"Sum": "sum", "Mean": "mean", "Max": "max", "Min": "min"}.items():
    register_converter(_tf, constant_inputs=(1,))(_reduction(_rx))


@register_converter("All", "Any", constant_inputs=(1,))
def _all_any(ctx, node, x, axes):
    """The min (All) or max (Any) of the bools as 0/1 int8s, compared with 0: over no elements
    the min is int8's largest and the max its smallest, so All is true and Any false there,
    as TF has them."""
    axis = [int(a) for a in np.atleast_1d(ctx.constant(node, 1))]
    keepdims = bool(ctx.attr(node, "keep_dims", False))
    reduce = relax.op.min if node.op == "All" else relax.op.max
    reduced = reduce(relax.op.astype(x, "int8"), axis=axis, keepdims=keepdims)
    return relax.op.greater(reduced, relax.const(0, "int8"))


@register_converter("Prod")
def _prod(ctx, node, x, axes):
    if isinstance(x, ShapeValue):
        return ShapeValue([product(x)], scalar=not ctx.attr(node, "keep_dims", False))
    return _reduction("prod")(ctx, node, x, axes)


@register_converter("Cast")
def _cast(ctx, node, x):
    if isinstance(x, ShapeValue):  # dims are dims whatever the int type that holds them
        if ctx.attr(node, "DstT").startswith(("int", "uint")):
            return x
        return relax.op.astype(shape_tensor(ctx, x, "int64"), ctx.attr(node, "DstT"))
    return relax.op.astype(x, ctx.attr(node, "DstT"))


@register_converter("SelectV2")
def _select_v2(ctx, node, cond, x, y):
    x, y, cond = same_dims(ctx, [x, y, cond])
    return relax.op.where(cond, x, y)


@register_converter("Select")
def _select(ctx, node, cond, x, y):
    # v1: a vector condition picks whole rows of higher-rank x and y.
    rank, cond_rank = len(x.ty.shape), len(cond.ty.shape)
    if cond_rank == 1 and rank > 1:
        cond = ctx.bb.emit(relax.op.reshape(cond, [cond.ty.shape[0]] + [1] * (rank - 1)))
    x, y, cond = same_dims(ctx, [x, y, cond])
    return relax.op.where(cond, x, y)


@register_converter("Reciprocal", "Inv")
def _reciprocal(ctx, node, x):
    return relax.op.divide(relax.const(1, ctx.attr(node, "T")), x)


@register_converter("AddN", broadcast=True)
def _add_n(ctx, node, *xs):
    total = xs[0]
    for x in xs[1:]:
        total = relax.op.add(total, x)
    return total


@register_converter("ClipByValue", broadcast=True)
def _clip_by_value(ctx, node, x, low, high):
    op = relax.op
    # TF's own gives a NaN x as NaN or a bound by where it lies (its scalar or vector loop):
    # NaN, always, here (lowering/nans.py), as is a NaN bound.
    return op.minimum(op.maximum(x, low), high)


@register_converter("ArgMax", "ArgMin", constant_inputs=(1,))
def _arg_max(ctx, node, x, axis):
    fn = relax.op.argmax if node.op == "ArgMax" else relax.op.argmin
    out = fn(x, axis=int(ctx.constant(node, 1)))
    return relax.op.astype(out, ctx.attr(node, "output_type", "int64"))
