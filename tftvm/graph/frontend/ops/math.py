"""Converters for TF's arithmetic: elementwise math, comparisons, reductions, casts and
selects (products: matmul.py)."""
from __future__ import annotations

import operator

import numpy as np
from tvm import relax

from ..helpers import checked_axis, libm, product
from ..registry import ShapeValue, Unsupported, register_converter, same_dims, shape_arithmetic, shape_tensor
from .indexing import checked_nonempty


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
        return relax.op.multiply(square, square)
    powered = x
    for _ in range(times - 1):
        powered = relax.op.multiply(powered, x)
    return powered  # y has one element and no more dims than x: x's shape, as the power has


for _tf, _rx in {"Greater": "greater", "GreaterEqual": "greater_equal", "Less": "less",
                 "LessEqual": "less_equal", "LogicalAnd": "logical_and", "LogicalOr": "logical_or"}.items():  # fmt: skip
    register_converter(_tf, broadcast=True)(_binary(_rx))


@register_converter("Equal", "NotEqual", broadcast=True)
def _equal(ctx, node, x, y):
    op = relax.op
    if str(x.ty.dtype) == "bool":  # TVM compares bools as floats, and LLVM's verifier rejects that
        different = op.logical_xor(x, y)
        return different if node.op == "NotEqual" else op.logical_not(different)
    return (op.equal if node.op == "Equal" else op.not_equal)(x, y)


for _tf, _rx in {"LogicalNot": "logical_not", "Floor": "floor", "Ceil": "ceil", "Sign": "sign",
                 "Sin": "sin", "Cos": "cos", "ZerosLike": "zeros_like",
                 "OnesLike": "ones_like"}.items():  # fmt: skip
    register_converter(_tf)(_unary(_rx))


for _tf, _rx in {"Relu": "nn.relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp",
                 "Log": "log", "Sqrt": "sqrt", "Rsqrt": "rsqrt", "Neg": "negative", "Abs": "abs",
                 "Square": "square", "Erf": "erf", "Tan": "tan", "Atan": "atan", "Asin": "asin",
                 "Acos": "acos", "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh",
                 "Acosh": "acosh"}.items():  # fmt: skip
    register_converter(_tf)(_unary(_rx))


# Float classes: TF's take floats only, and so do these (an int input never reaches them).
for _tf, _rx in {"IsNan": "isnan", "IsInf": "isinf", "IsFinite": "isfinite"}.items():
    register_converter(_tf)(_unary(_rx))


for _tf, _rx in {"BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}.items():
    register_converter(_tf, broadcast=True)(_binary(_rx))
register_converter("Invert")(_unary("bitwise_not"))


@register_converter("LeftShift", "RightShift", broadcast=True)
def _shift(ctx, node, x, y):
    """TF clamps the shift into [0, bits - 1] (a wider one is undefined in C++, and in LLVM
    gives poison); a left shift wraps, a right shift of a signed int copies its sign bit."""
    dtype = ctx.attr(node, "T")
    bits = int("".join(c for c in dtype if c.isdigit()))
    op = relax.op
    y = op.clip(y, 0, bits - 1)
    return (op.left_shift if node.op == "LeftShift" else op.right_shift)(x, y)


@register_converter("Softsign")
def _softsign(ctx, node, x):
    op = relax.op
    return op.divide(x, op.add(op.abs(x), relax.const(1, ctx.attr(node, "T"))))


@register_converter("Log1p", "Expm1", "Atanh")
def _near_zero(ctx, node, x):
    """libm's log1p and expm1, which keep their precision for an x near 0 where log(1 + x)
    rounds 1 + x first, and atanh as (log1p(x) - log1p(-x)) / 2 (TVM's atanh divides
    (1 + x) by (1 - x) first, off by 1e-4 of itself at 1e-4). Relax has none of these:
    each is a kernel calling libm."""
    from tvm import te, tirx

    def element(v, dtype):
        if node.op == "Atanh":
            return (libm("log1p", dtype, v) - libm("log1p", dtype, -v)) * tirx.const(0.5, dtype)
        return libm(node.op.lower(), dtype, v)

    return ctx.bb.call_te(lambda t: te.compute(t.shape, lambda *i: element(t[i], t.dtype), name=node.op.lower()), x)


@register_converter("Atan2", broadcast=True)
def _atan2(ctx, node, y, x):
    # A pair of denormals (zeros in TF's threads) gives NaN here, as libm's atan2f does with
    # denormals-are-zero; TF's Eigen atan2 gives pi/4 there (and for atan2(1e-40, 0) too).
    return relax.op.atan2(y, x)


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


def _refuse_int_zero_division(ctx, node, y):
    from tvm.ir.expr import Constant

    if "int" in str(y.ty.dtype) and not (isinstance(y, Constant) and np.all(y.value.numpy() != 0)):
        # TF raises "Integer division by zero"; a TVM kernel's idiv traps, and SIGFPE ends the process.
        raise Unsupported("an integer division by a tensor that may hold 0 stays in TF, which reports it")


@register_converter("TruncateDiv", "TruncateMod", broadcast=True)
def _truncate_div(ctx, node, x, y):
    """Rounded toward zero, as C's / and % (fmod for floats)."""
    _refuse_int_zero_division(ctx, node, y)
    if node.op == "TruncateDiv" and not str(x.ty.dtype).startswith(("int", "uint")):
        return relax.op.trunc(relax.op.divide(x, y))
    return (relax.op.divide if node.op == "TruncateDiv" else relax.op.mod)(x, y)


@register_converter("FloorDiv", "FloorMod")
def _floor_div(ctx, node, x, y):
    if isinstance(x, ShapeValue) or isinstance(y, ShapeValue):
        return shape_arithmetic(ctx, node, [x, y], _floor_dims(node.op))
    _refuse_int_zero_division(ctx, node, y)
    x, y = same_dims(ctx, [x, y])
    if node.op == "FloorMod" and not str(x.ty.dtype).startswith(("int", "uint")):
        return _float_floor_mod(ctx, node, x, y)
    return {"FloorDiv": relax.op.floor_divide, "FloorMod": relax.op.floor_mod}[node.op](x, y)


def _float_floor_mod(ctx, node, x, y):
    """TF's rule: fmod(x, y), plus y where that is not 0 and x and y differ in sign. TVM's
    x - floor(x / y) * y gives NaN for an infinite y (TF: x, or y where the signs differ)."""
    op, zero = relax.op, relax.const(0, ctx.attr(node, "T"))
    remainder = ctx.bb.emit(op.mod(x, y))
    signs_differ = op.logical_xor(op.less(x, zero), op.less(y, zero))
    return op.where(op.logical_and(op.not_equal(remainder, zero), signs_differ), op.add(remainder, y), remainder)


@register_converter("Erfc")
def _erfc(ctx, node, x):
    return relax.op.subtract(relax.const(1, ctx.attr(node, "T")), relax.op.erf(x))


@register_converter("SquaredDifference", broadcast=True)
def _squared_difference(ctx, node, x, y):
    op = relax.op
    return op.square(op.subtract(x, y))


def _reduction(fn_name):
    def convert(ctx, node, x, axes):
        axis = [int(a) for a in np.atleast_1d(ctx.constant(node, 1))]
        keepdims = bool(ctx.attr(node, "keep_dims", False))
        reduced = getattr(relax.op, fn_name)(x, axis=axis, keepdims=keepdims)  # max, min: see lowering/nans.py
        return _over_no_elements(ctx, node, x, axis, reduced, _identity(fn_name, str(x.ty.dtype)))

    return convert


def _identity(fn_name: str, dtype: str):
    """What TF's reduction `fn_name` gives over no elements."""
    is_float = dtype.startswith(("float", "bfloat"))
    if fn_name == "mean":
        if not is_float:
            return None  # TF divides by a count of 0
        return float("nan")
    if fn_name in ("max", "min"):
        sign = -1 if fn_name == "max" else 1
        return sign * float("inf") if is_float else (np.iinfo(dtype).min if sign < 0 else np.iinfo(dtype).max)
    return {"sum": 0, "prod": 1}[fn_name]


def _over_no_elements(ctx, node, x, axis, reduced, identity):
    """`reduced`, or `identity` where the reduced axes hold no elements. TVM's reductions
    start from their identity in their first step, so over no elements they leave whatever
    the output's memory held; TF gives the identity (the mean NaN, All true, Any false).
    Static axes of elements cost nothing; a symbolic one, a select on its size."""
    from tvm import tirx

    rank = len(x.ty.shape)
    count = tirx.const(1, "int64")
    for a in axis if rank else []:
        count = count * x.ty.shape[a % rank]
    if isinstance(count, tirx.IntImm) and int(count) > 0:
        return reduced
    if identity is None:
        raise Unsupported(f"{node.op} of {x.ty.dtype} over axes that may hold no elements")
    if isinstance(count, tirx.IntImm):  # static 0: the reduction is not even compiled (TOPI's mean divides by 0)
        kept = {a % rank for a in axis}
        keepdims = bool(ctx.attr(node, "keep_dims", False))
        shape = [1 if a in kept else d for a, d in enumerate(x.ty.shape) if keepdims or a not in kept]
        dtype = str(x.ty.dtype)
        if all(isinstance(d, tirx.IntImm) for d in shape):
            return relax.const(np.full([int(d) for d in shape], identity, dtype), dtype)
        # zeros plus the identity: TVM fails to lower a `full` of an infinity or a NaN
        return relax.op.add(relax.op.zeros(shape, dtype), relax.const(identity, dtype))
    reduced = ctx.bb.emit(reduced)
    fill = relax.const(identity, str(reduced.ty.dtype))
    size = shape_tensor(ctx, ShapeValue([count], scalar=True), "int64")
    return relax.op.where(relax.op.equal(size, relax.const(0, "int64")), fill, reduced)


for _tf, _rx in {"Sum": "sum", "Mean": "mean", "Max": "max", "Min": "min"}.items():
    register_converter(_tf, constant_inputs=(1,))(_reduction(_rx))


@register_converter("EuclideanNorm", constant_inputs=(1,), dtypes=("float16", "bfloat16", "float32", "float64"))
def _euclidean_norm(ctx, node, x, axes):
    return relax.op.sqrt(_reduction("sum")(ctx, node, ctx.bb.emit(relax.op.multiply(x, x)), axes))


@register_converter("All", "Any", constant_inputs=(1,))
def _all_any(ctx, node, x, axes):
    """The min (All) or max (Any) of the bools as 0/1 int8s, compared with 0; over no elements
    All is true and Any false, as TF has them."""
    axis = [int(a) for a in np.atleast_1d(ctx.constant(node, 1))]
    keepdims = bool(ctx.attr(node, "keep_dims", False))
    reduce = relax.op.min if node.op == "All" else relax.op.max
    as_int8 = ctx.bb.emit(relax.op.astype(x, "int8"))
    reduced = reduce(as_int8, axis=axis, keepdims=keepdims)
    # The identity as an int8 (a select of bools fails to vectorize in TVM's LLVM codegen).
    reduced = _over_no_elements(ctx, node, as_int8, axis, reduced, int(node.op == "All"))
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
    from tvm import tirx

    axis = checked_axis(node, int(ctx.constant(node, 1)), len(x.ty.shape))
    dim = x.ty.shape[axis]
    if isinstance(dim, tirx.IntImm) and int(dim) == 0:
        raise Unsupported(f"{node.op} along an empty axis (TF raises)")
    if not isinstance(dim, tirx.IntImm):  # TF raises where it is 0 when the call runs
        x = checked_nonempty(ctx, node, x, axis)
    fn = relax.op.argmax if node.op == "ArgMax" else relax.op.argmin
    out = fn(x, axis=axis)
    return relax.op.astype(out, ctx.attr(node, "output_type", "int64"))

