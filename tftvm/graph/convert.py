"""TF nodes -> Relax: one short converter per TF op type, all in one table.

A converter gets the conversion context, the TF NodeDef and the Relax values
of its data inputs, and returns the Relax value of its output(s). It raises
Unsupported, with a reason, for attributes it does not handle; the node then
stays in TF.
"""
from __future__ import annotations

import logging
from typing import Callable

import numpy as np

log = logging.getLogger(__name__)


class Unsupported(Exception):
    """This node cannot be converted; the message says why. `node`, when set, names it."""

    def __init__(self, message: str, node: str | None = None):
        super().__init__(message)
        self.node = node


class ShapeValue(list):
    """An int tensor that holds (part of) a shape, kept as symbolic dims, never materialized.

    Shape -> Gather/StridedSlice -> Pack/Concat -> Reshape chains (what Keras emits for a
    symbolic batch) become a Reshape to symbolic dims. `scalar` marks a rank-0 value.
    """

    def __init__(self, dims, scalar: bool = False):
        super().__init__(dims)
        self.scalar = scalar


CONVERTERS: dict[str, Callable] = {}


def converts(*op_types: str):
    def register(fn):
        for t in op_types:
            CONVERTERS[t] = fn
        return fn

    return register


class Context:
    """What a converter may ask about its node beyond its Relax inputs."""

    def __init__(self, constants: dict, bb=None):
        self.constants = constants  # TF tensor name -> np.ndarray, for Const inputs
        self.bb = bb  # the BlockBuilder the node's bindings go to
        self.merged: list = []  # (symbolic dim, the dim it equals): see same_dims

    def symbol(self, var):
        """The representative of the symbols merged with `var`."""
        while (to := next((t for v, t in self.merged if v.same_as(var)), None)) is not None:
            var = to
        return var

    def merge(self, a, b) -> None:
        """Record a == b for two symbolic dims."""
        a, b = self.symbol(a), self.symbol(b)
        if not a.same_as(b):
            self.merged.append((b, a))

    def attr(self, node, name, default=None):
        if name not in node.attr:
            return default
        a = node.attr[name]
        kind = a.WhichOneof("value")
        if kind == "list":
            lst = a.list
            return list(lst.i) or list(lst.s) or list(lst.f)
        return {"s": lambda: a.s.decode(), "i": lambda: a.i, "f": lambda: a.f, "b": lambda: a.b,
                "type": lambda: _dtype_name(a.type)}.get(kind, lambda: None)()  # fmt: skip

    def constant(self, node, index: int) -> np.ndarray:
        name = tensor_name(node.input[index])
        if name not in self.constants:
            raise Unsupported(f"input {index} of {node.op} must be a constant (it is {name})")
        return self.constants[name]


def tensor_name(name: str) -> str:
    return name if ":" in name else name + ":0"


def dims_equal(a, b) -> bool:
    """Whether two shapes are provably the same (equal static dims, the same symbols)."""
    from tvm.sym.analyzer import Analyzer

    analyzer = Analyzer()
    return len(a) == len(b) and all(analyzer.can_prove_equal(x, y) for x, y in zip(a, b))


def _dtype_name(enum) -> str:
    import tensorflow as tf

    return tf.as_dtype(enum).name


def _relax():
    from tvm import relax

    return relax


def same_dims(ctx, values: list, skip=()) -> list:
    """`values` with each symbolic dim that differs from the first value's, at the same place
    (right-aligned; axes in `skip`, counted from the end, excepted), made that dim.

    Two graph inputs with a None batch get two symbols, so Relax cannot infer the shape of
    `x * W + h * U`. TF needs those dims equal at run time (or one of them 1, a broadcast no
    batch dim does), so equal they are: a match_cast gives Relax the shape now, and
    `merge_symbols` later makes the two symbols one, so a run where the dims differ stops
    at the kernel's (or the VM's) input check, which names them, never with a wrong result.
    """
    from tvm import relax, tirx

    first = list(values[0].ty.shape)
    out = [values[0]]
    for value in values[1:]:
        dims, changed = list(value.ty.shape), False
        for back in range(1, min(len(first), len(dims)) + 1):
            a, b = first[-back], dims[-back]
            if -back in skip or not (isinstance(a, tirx.Var) and isinstance(b, tirx.Var)):
                continue  # products like d0 * 7 are left to Relax's own inference
            if not a.same_as(b):
                ctx.merge(a, b)
                dims[-back], changed = a, True
        if changed:
            value = ctx.bb.match_cast(value, relax.TensorType(dims, value.ty.dtype))
        out.append(value)
    return out


def merge_symbols(mod, ctx):
    """`mod` with the symbols `same_dims` merged made one: FuseTIR cannot fuse across the
    match_casts (it recurses forever), and after the substitution they are no-ops."""
    from tvm import relax

    if not ctx.merged:
        return mod
    mod["main"] = mod["main"].bind_symbolic_vars({v: ctx.symbol(v) for v, _ in ctx.merged})
    return relax.transform.CanonicalizeBindings()(mod)


def _binary(fn_name):
    def convert(ctx, node, x, y):
        x, y = same_dims(ctx, [x, y])
        return getattr(_relax().op, fn_name)(x, y)

    return convert


def _unary(path):
    def convert(ctx, node, x):
        fn = _relax().op
        for part in path.split("."):
            fn = getattr(fn, part)
        return fn(x)

    return convert


for _tf, _rx in {"Add": "add", "AddV2": "add", "Sub": "subtract", "Mul": "multiply",
                 "RealDiv": "divide", "Maximum": "maximum", "Minimum": "minimum",
                 "Pow": "power"}.items():  # fmt: skip
    CONVERTERS[_tf] = _binary(_rx)
for _tf, _rx in {"Greater": "greater", "GreaterEqual": "greater_equal", "Less": "less",
                 "LessEqual": "less_equal", "Equal": "equal", "NotEqual": "not_equal",
                 "LogicalAnd": "logical_and", "LogicalOr": "logical_or"}.items():  # fmt: skip
    CONVERTERS[_tf] = _binary(_rx)
for _tf, _rx in {"LogicalNot": "logical_not", "Floor": "floor", "Ceil": "ceil", "Sign": "sign",
                 "Sin": "sin", "Cos": "cos", "ZerosLike": "zeros_like",
                 "OnesLike": "ones_like"}.items():  # fmt: skip
    CONVERTERS[_tf] = _unary(_rx)
for _tf, _rx in {"Relu": "nn.relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp",
                 "Log": "log", "Sqrt": "sqrt", "Rsqrt": "rsqrt", "Neg": "negative", "Abs": "abs",
                 "Square": "square", "Erf": "erf"}.items():  # fmt: skip
    CONVERTERS[_tf] = _unary(_rx)


@converts("FloorDiv", "FloorMod")
def _floor_div(ctx, node, x, y):
    from tvm.ir.expr import Constant

    if "int" in str(y.ty.dtype) and not (isinstance(y, Constant) and np.all(y.value.numpy() != 0)):
        # TF raises "Integer division by zero"; a TVM kernel's idiv traps, and SIGFPE ends the process.
        raise Unsupported("an integer division by a tensor that may hold 0 stays in TF, which reports it")
    x, y = same_dims(ctx, [x, y])
    return {"FloorDiv": _relax().op.floor_divide, "FloorMod": _relax().op.floor_mod}[node.op](x, y)


@converts("Identity")
def _identity(ctx, node, x):
    return x


@converts("IdentityN")
def _identity_n(ctx, node, *xs):
    return list(xs)  # Keras' swish emits it (a custom gradient); inference passes values through


@converts("StopGradient", "PreventGradient")
def _stop_gradient(ctx, node, x):
    return x  # inference graphs: no gradient to stop


@converts("Erfc")
def _erfc(ctx, node, x):
    return _relax().op.subtract(_relax().const(1, ctx.attr(node, "T")), _relax().op.erf(x))


@converts("Einsum")
def _einsum(ctx, node, *operands):
    equation = ctx.attr(node, "equation")
    return _relax().op.einsum(list(operands), equation)


@converts("SquaredDifference")
def _squared_difference(ctx, node, x, y):
    op = _relax().op
    x, y = same_dims(ctx, [x, y])
    return op.square(op.subtract(x, y))


@converts("Relu6")
def _relu6(ctx, node, x):
    return _relax().op.clip(x, 0, 6)  # NaNs pass: see nans.py


@converts("Softplus")
def _softplus(ctx, node, x):
    op = _relax().op
    # log(1 + exp(x)) without overflow: max(x, 0) + log(1 + exp(-|x|))
    zero = _relax().const(0, ctx.attr(node, "T"))
    one = _relax().const(1, ctx.attr(node, "T"))
    return op.add(op.maximum(x, zero), op.log(op.add(one, op.exp(op.negative(op.abs(x))))))


@converts("Elu")
def _elu(ctx, node, x):
    op, relax = _relax().op, _relax()
    t = ctx.attr(node, "T")
    zero, one = relax.const(0, t), relax.const(1, t)
    return op.where(op.greater(x, zero), x, op.subtract(op.exp(x), one))


@converts("Selu")
def _selu(ctx, node, x):
    relax = _relax()
    t = ctx.attr(node, "T")
    scale, alpha = relax.const(1.0507009873554805, t), relax.const(1.6732632423543772, t)
    elu = _elu(ctx, node, x)
    op = relax.op
    return op.multiply(scale, op.where(op.greater(x, relax.const(0, t)), x, op.multiply(alpha, elu)))


@converts("BiasAdd", "BiasAddV1")
def _bias_add(ctx, node, x, bias):
    if ctx.attr(node, "data_format", "NHWC") == "NCHW":  # bias along axis 1
        bias = _relax().op.reshape(bias, [bias.ty.shape[0]] + [1] * (len(x.ty.shape) - 2))
    return _relax().op.add(x, bias)


@converts("MatMul")
def _matmul(ctx, node, a, b):
    op = _relax().op
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
    batch dims are the same and the dots are long or the columns do not tile. Measured
    through optimize with a ReLU after it: Q·Kᵀ [512, 30, 128] x 30 keys 6.2 -> 2.0 ms (the
    transpose alone took 3.0 ms: its inner 30 does not vectorize), 17 keys 5.2 -> 0.74 ms,
    [256, 1024] x [1024, 1024]ᵀ 6.1 -> 3.9 ms; but [8, 128, 64] x 128 keys 0.36 -> 0.51 ms,
    so a short dot over a whole number of vectors of keys keeps the matmul."""
    from tvm import tirx
    from tvm.ir.expr import Constant

    from ..schedule import vector_lanes

    if isinstance(b, Constant) or not dims_equal(list(a.ty.shape)[:-2], list(b.ty.shape)[:-2]):
        return False
    depth, cols = b.ty.shape[-1], b.ty.shape[-2]
    lanes = vector_lanes(str(b.ty.dtype))
    long_dots = isinstance(depth, tirx.IntImm) and int(depth) >= 8 * lanes
    return long_dots or not (isinstance(cols, tirx.IntImm) and int(cols) % lanes == 0)


@converts("BatchMatMulV2", "BatchMatMulV3")
def _batch_matmul(ctx, node, a, b):
    op = _relax().op

    def swap_last(t):
        n = len(t.ty.shape)
        return op.permute_dims(t, list(range(n - 2)) + [n - 1, n - 2])

    a, b = same_dims(ctx, [a, b], skip=(-1, -2))  # the batch dims
    adj_x, adj_y = ctx.attr(node, "adj_x", False), ctx.attr(node, "adj_y", False)
    if adj_y and not adj_x and _rows_by_rows(a, b):
        batch = "abcdefgh"[: len(a.ty.shape) - 2]
        return op.einsum([a, b], f"{batch}ik,{batch}jk->{batch}ij")
    if adj_x:
        a = swap_last(a)
    if adj_y:
        b = swap_last(b)
    return op.matmul(a, b)


@converts("Softmax")
def _softmax(ctx, node, x):
    return _relax().op.nn.softmax(x, axis=-1)


@converts("LogSoftmax")
def _log_softmax(ctx, node, x):
    return _relax().op.nn.log_softmax(x, axis=-1)


def _reduction(fn_name):
    def convert(ctx, node, x, axes):
        axis = [int(a) for a in np.atleast_1d(ctx.constant(node, 1))]
        keepdims = bool(ctx.attr(node, "keep_dims", False))
        return getattr(_relax().op, fn_name)(x, axis=axis, keepdims=keepdims)  # max, min: see nans.py

    return convert


for _tf, _rx in {"Sum": "sum", "Mean": "mean", "Max": "max", "Min": "min"}.items():
    CONVERTERS[_tf] = _reduction(_rx)


@converts("Reshape")
def _reshape(ctx, node, x, shape):
    dims = shape if isinstance(shape, ShapeValue) else [int(d) for d in ctx.constant(node, 1)]
    if any(isinstance(d, int) and d == -1 for d in dims):
        known = 1
        for d in dims:
            if not (isinstance(d, int) and d == -1):
                known = known * d
        total = 1
        for d in x.ty.shape:
            total = total * d
        dims = [total // known if isinstance(d, int) and d == -1 else d for d in dims]
    return _relax().op.reshape(x, [_simplify(d) for d in dims])


def _simplify(dim):
    """(n * 320) // 320 -> n: simple dims keep kernels free of scalar shape parameters."""
    if isinstance(dim, int):
        return dim
    from tvm.sym.analyzer import Analyzer

    return Analyzer().simplify(dim)


def _shape_operand(ctx, node, index, value) -> ShapeValue:
    """A shape-valued input: a ShapeValue already, or a constant int tensor."""
    if isinstance(value, ShapeValue):
        return value
    c = np.asarray(ctx.constant(node, index))
    return ShapeValue([int(v) for v in c.reshape(-1)], scalar=c.ndim == 0)


@converts("Shape")
def _shape(ctx, node, x):
    return ShapeValue(list(x.ty.shape))


@converts("GatherV2")
def _gather(ctx, node, params, indices, axis):
    axis = int(ctx.constant(node, 2))
    if ctx.attr(node, "batch_dims", 0):
        raise Unsupported("GatherV2 with batch_dims")
    if isinstance(params, ShapeValue):
        idx = np.asarray(ctx.constant(node, 1))
        picked = [params[int(i)] for i in idx.reshape(-1)]
        return ShapeValue(picked, scalar=idx.ndim == 0)
    # TF rejects an index out of range; a kernel cannot raise, but it must never read outside
    # `params`: clip, not TVM's default unchecked "fast" mode.
    return _relax().op.take(params, indices, axis=axis, mode="clip")


@converts("StridedSlice")
def _strided_slice(ctx, node, x, begin, end, strides):
    begin, end, strides = (np.asarray(ctx.constant(node, i)).reshape(-1) for i in (1, 2, 3))
    masks = {m: int(ctx.attr(node, m, 0)) for m in
             ("begin_mask", "end_mask", "shrink_axis_mask", "ellipsis_mask", "new_axis_mask")}  # fmt: skip
    if masks["ellipsis_mask"] or masks["new_axis_mask"]:
        raise Unsupported("StridedSlice with ellipsis or new axis")
    if isinstance(x, ShapeValue):
        if len(begin) != 1:
            raise Unsupported("StridedSlice of a shape with more than one axis")
        if masks["shrink_axis_mask"] & 1:
            return ShapeValue([x[int(begin[0])]], scalar=True)
        b = None if masks["begin_mask"] & 1 else int(begin[0])
        e = None if masks["end_mask"] & 1 else int(end[0])
        return ShapeValue(x[b:e:int(strides[0])])
    rank = len(x.ty.shape)
    axes, b_out, e_out, s_out, squeeze = [], [], [], [], []
    for a in range(len(begin)):
        dim = x.ty.shape[a]
        b = 0 if masks["begin_mask"] >> a & 1 else int(begin[a])
        if masks["shrink_axis_mask"] >> a & 1:
            e, squeeze = b + 1 if b != -1 else dim, squeeze + [a]
        else:
            e = dim if masks["end_mask"] >> a & 1 else int(end[a])
        axes.append(a), b_out.append(b), e_out.append(e), s_out.append(int(strides[a]))
    out = _relax().op.strided_slice(x, axes, b_out, e_out, s_out)
    if rank and squeeze:
        out = _relax().op.squeeze(out, axis=squeeze)
    return out


@converts("Prod")
def _prod(ctx, node, x, axes):
    if isinstance(x, ShapeValue):
        total = 1
        for d in x:
            total = total * d
        return ShapeValue([total], scalar=not ctx.attr(node, "keep_dims", False))
    return _reduction("prod")(ctx, node, x, axes)


@converts("Transpose")
def _transpose(ctx, node, x, perm):
    return _relax().op.permute_dims(x, [int(p) for p in ctx.constant(node, 1)])


@converts("ExpandDims")
def _expand_dims(ctx, node, x, axis):
    return _relax().op.expand_dims(x, int(ctx.constant(node, 1)))


@converts("Squeeze")
def _squeeze(ctx, node, x):
    dims = ctx.attr(node, "squeeze_dims") or None
    return _relax().op.squeeze(x, axis=[int(d) for d in dims] if dims else None)


@converts("Cast")
def _cast(ctx, node, x):
    return _relax().op.astype(x, ctx.attr(node, "DstT"))


def to_relax(nodes, inputs, outputs, constants=None):
    """A Relax IRModule whose main computes `outputs` from `inputs` over `nodes`.

    nodes: NodeDefs in topological order; inputs: (tensor name, dtype, shape)
    with None for unknown dims; outputs: tensor names. Const nodes among `nodes`
    become Relax constants.
    """
    import tensorflow as tf
    from tvm import relax

    constants = dict(constants or {})
    for node in nodes:
        if node.op == "Const":
            constants[node.name + ":0"] = tf.make_ndarray(node.attr["value"].tensor)
    bb = relax.BlockBuilder()
    ctx = Context(constants, bb)
    params, env = [], {}
    for i, (name, dtype, shape) in enumerate(inputs):
        params.append(relax_param(i, dtype, shape))
        env[tensor_name(name)] = params[-1]
    with bb.function("main", params):
        with bb.dataflow():
            for node in nodes:
                if node.op == "Const":
                    value = constants[node.name + ":0"]
                    # relax.const makes float64 arrays float32 unless told the dtype.
                    env[node.name + ":0"] = relax.const(value, value.dtype.name)
                    continue
                if node.op not in CONVERTERS:
                    raise Unsupported(f"no converter for TF op {node.op}", node.name)
                why = convert_node(ctx, env, node)
                if why is not None:
                    raise Unsupported(why, node.name)
            result = [env[tensor_name(o)] for o in outputs]
            if any(isinstance(r, ShapeValue) for r in result):
                raise Unsupported("a cluster output is a shape value")
            out = bb.emit_output(result[0] if len(result) == 1 else relax.Tuple(result))
        bb.emit_func_output(out)
    return merge_symbols(bb.get(), ctx)


def convert_node(ctx, env: dict, node) -> str | None:
    """Convert `node` (its op has a converter) into `ctx.bb`'s function, its outputs into `env`:
    None on success, else why it stays in TF. A converter's failure costs this node, never
    its cluster or model."""
    data_inputs = [tensor_name(i) for i in node.input if not i.startswith("^")]
    missing = [i for i in data_inputs if i not in env]
    if missing:  # an input only TF can produce (e.g. a string)
        return f"input {missing[0]} is not a TVM value"
    try:
        bind_outputs(ctx.bb, env, node, CONVERTERS[node.op](ctx, node, *[env[i] for i in data_inputs]))
        return unknown_shape(env, node)
    except Unsupported as err:
        return str(err)
    except Exception as err:
        log.warning("converter for %s (%s) failed, it runs in TF: %s: %s", node.name, node.op,
                    type(err).__name__, err)  # fmt: skip
        return f"converter failed: {type(err).__name__}: {err}"


def relax_param(index: int, dtype: str, shape) -> object:
    """Graph input `index` as a Relax parameter; a None dim becomes a symbolic one."""
    from tvm import relax, tirx

    dims = [tirx.Var(f"d{index}_{d}", "int64") if s is None else int(s) for d, s in enumerate(shape)]
    return relax.Var(f"in{index}", relax.TensorType(dims, dtype))


def unknown_shape(env: dict, node) -> str | None:
    """Why a converted output cannot stay in Relax: its shape is unknown (e.g. `a + b` over
    two different symbolic batch dims), and Relax's legalization needs every shape."""
    from tvm import relax

    index = 0
    while (name := f"{node.name}:{index}") in env:
        ty = getattr(env[name], "ty", None)
        if isinstance(ty, relax.TensorType) and ty.shape is None:
            return f"Relax cannot infer the shape of {name} from its inputs' symbolic dims"
        index += 1
    return None


def bind_outputs(bb, env: dict, node, value) -> None:
    """Record a converter's result under the node's output tensor names."""
    if isinstance(value, list) and not isinstance(value, ShapeValue):  # one per output
        for i, v in enumerate(value):  # shape values (tf.unstack(tf.shape(x))) stay Python-side
            env[f"{node.name}:{i}"] = v if isinstance(v, ShapeValue) else bb.emit(v)
    else:  # shape values stay Python-side; they only ever feed Reshape and friends
        env[node.name + ":0"] = value if isinstance(value, ShapeValue) else bb.emit(value)


# Convolutions and pooling (NHWC, as TF lays them out by default).

def _static_dims(x, what: str, axes=None) -> list:
    """The dims of `x` as ints; those in `axes` (default: all) must be static."""
    from tvm import tirx

    shape = list(x.ty.shape)
    axes = range(len(shape)) if axes is None else axes
    for a in axes:
        if not isinstance(shape[a], tirx.IntImm):
            raise Unsupported(f"{what} needs static dims {list(axes)}, got {shape}")
    return [int(d.value) if isinstance(d, tirx.IntImm) else None for d in shape]


def _window_padding(ctx, node, x, window, strides, dilations):
    """Relax (top, left, bottom, right) padding for TF's SAME / VALID / EXPLICIT."""
    padding = ctx.attr(node, "padding")
    if padding == "VALID":
        return (0, 0, 0, 0)
    if padding == "EXPLICIT":
        p = [int(v) for v in ctx.attr(node, "explicit_paddings")]
        return (p[2], p[4], p[3], p[5])
    height, width = _static_dims(x, node.op, (1, 2))[1:3]
    pads = []
    for size, k, s, d in zip((height, width), window, strides, dilations):
        out = -(-size // s)
        pads.append(max((out - 1) * s + (k - 1) * d + 1 - size, 0))
    return (pads[0] // 2, pads[1] // 2, pads[0] - pads[0] // 2, pads[1] - pads[1] // 2)


def _nhwc_only(ctx, node):
    if ctx.attr(node, "data_format", "NHWC") != "NHWC":
        raise Unsupported(f"{node.op} with data_format {ctx.attr(node, 'data_format')}")


@converts("Conv2D")
def _conv2d(ctx, node, x, w):
    _nhwc_only(ctx, node)
    strides, dil = ctx.attr(node, "strides")[1:3], (ctx.attr(node, "dilations") or [1, 1, 1, 1])[1:3]
    kh, kw, cin, _ = _static_dims(w, "Conv2D filter")
    groups = _static_dims(x, "Conv2D", (3,))[3] // cin
    pad = _window_padding(ctx, node, x, (kh, kw), strides, dil)
    return _relax().op.nn.conv2d(x, w, strides=strides, padding=pad, dilation=dil, groups=groups,
                                 data_layout="NHWC", kernel_layout="HWIO")  # fmt: skip


@converts("DepthwiseConv2dNative")
def _depthwise(ctx, node, x, w):
    _nhwc_only(ctx, node)
    strides, dil = ctx.attr(node, "strides")[1:3], (ctx.attr(node, "dilations") or [1, 1, 1, 1])[1:3]
    kh, kw, c, m = _static_dims(w, "depthwise filter")
    # TF's (H, W, C, M) filter is a grouped conv with C groups of M outputs each.
    w = _relax().op.reshape(w, [kh, kw, 1, c * m])
    pad = _window_padding(ctx, node, x, (kh, kw), strides, dil)
    return _relax().op.nn.conv2d(x, w, strides=strides, padding=pad, dilation=dil, groups=c,
                                 data_layout="NHWC", kernel_layout="HWIO")  # fmt: skip


def _pool(kind):
    def convert(ctx, node, x):
        _nhwc_only(ctx, node)
        window, strides = ctx.attr(node, "ksize")[1:3], ctx.attr(node, "strides")[1:3]
        pad = _window_padding(ctx, node, x, window, strides, (1, 1))
        fn = getattr(_relax().op.nn, kind)
        # TF averages over the window's valid elements only: count_include_pad=False.
        return fn(x, pool_size=window, strides=strides, padding=pad, layout="NHWC",
                  count_include_pad=False)  # fmt: skip

    return convert


CONVERTERS["MaxPool"] = _pool("max_pool2d")
CONVERTERS["AvgPool"] = _pool("avg_pool2d")


@converts("FusedBatchNormV3", "FusedBatchNorm")
def _fused_batch_norm(ctx, node, x, scale, offset, mean, variance, *rest):
    if ctx.attr(node, "is_training", True):
        raise Unsupported("FusedBatchNorm in training mode")
    _nhwc_only(ctx, node)
    op, relax = _relax().op, _relax()
    eps = relax.const(float(ctx.attr(node, "epsilon", 1e-3)), ctx.attr(node, "T"))
    inv = op.multiply(op.rsqrt(op.add(variance, eps)), scale)
    # x * inv + shift, as TF's own kernel computes it: a conv's x * inv then folds into its
    # weights (fold_scales), and the shift is computed from the statistics alone.
    return op.add(op.multiply(x, inv), op.subtract(offset, op.multiply(mean, inv)))


@converts("Pad", "PadV2")
def _pad(ctx, node, x, paddings, *value):
    pads = [int(p) for p in np.asarray(ctx.constant(node, 1)).reshape(-1)]
    fill = float(ctx.constant(node, 2)) if node.op == "PadV2" else 0.0
    return _relax().op.nn.pad(x, pads, pad_value=fill)


@converts("ConcatV2")
def _concat(ctx, node, *args):
    axis = int(ctx.constant(node, len(args) - 1))
    if any(isinstance(a, ShapeValue) for a in args[:-1]):
        dims = []
        for i, a in enumerate(args[:-1]):
            dims += _shape_operand(ctx, node, i, a)
        return ShapeValue(dims)
    rank = len(args[0].ty.shape)
    return _relax().op.concat(same_dims(ctx, list(args[:-1]), skip=(axis % rank - rank,)), axis=axis)


@converts("Pack")
def _pack(ctx, node, *args):
    if any(isinstance(a, ShapeValue) for a in args):
        dims = []
        for i, a in enumerate(args):
            dims += _shape_operand(ctx, node, i, a)
        return ShapeValue(dims)
    return _relax().op.stack(same_dims(ctx, list(args)), axis=int(ctx.attr(node, "axis", 0)))


# Element selection, filling and splitting.

@converts("SelectV2")
def _select_v2(ctx, node, cond, x, y):
    x, y, cond = same_dims(ctx, [x, y, cond])
    return _relax().op.where(cond, x, y)


@converts("Select")
def _select(ctx, node, cond, x, y):
    # v1: a vector condition picks whole rows of higher-rank x and y.
    rank, cond_rank = len(x.ty.shape), len(cond.ty.shape)
    if cond_rank == 1 and rank > 1:
        cond = ctx.bb.emit(_relax().op.reshape(cond, [cond.ty.shape[0]] + [1] * (rank - 1)))
    x, y, cond = same_dims(ctx, [x, y, cond])
    return _relax().op.where(cond, x, y)


@converts("Fill")
def _fill(ctx, node, dims, value):
    dims = _shape_operand(ctx, node, 0, dims)
    return _relax().op.full([_simplify(d) for d in dims], value, ctx.attr(node, "T"))


@converts("Tile")
def _tile(ctx, node, x, multiples):
    return _relax().op.tile(x, [int(m) for m in np.asarray(ctx.constant(node, 1)).reshape(-1)])


@converts("LeakyRelu")
def _leaky_relu(ctx, node, x):
    return _relax().op.nn.leakyrelu(x, float(ctx.attr(node, "alpha", 0.2)))


@converts("Reciprocal", "Inv")
def _reciprocal(ctx, node, x):
    return _relax().op.divide(_relax().const(1, ctx.attr(node, "T")), x)


@converts("AddN")
def _add_n(ctx, node, *xs):
    xs = same_dims(ctx, list(xs))
    total = xs[0]
    for x in xs[1:]:
        total = _relax().op.add(total, x)
    return total


@converts("ClipByValue")
def _clip_by_value(ctx, node, x, low, high):
    op = _relax().op
    x, low, high = same_dims(ctx, [x, low, high])
    # TF's own gives a NaN x as NaN or a bound by where it lies (its scalar or vector loop):
    # NaN, always, here (nans.py), as is a NaN bound.
    return op.minimum(op.maximum(x, low), high)


@converts("ArgMax", "ArgMin")
def _arg_max(ctx, node, x, axis):
    fn = _relax().op.argmax if node.op == "ArgMax" else _relax().op.argmin
    out = fn(x, axis=int(ctx.constant(node, 1)))
    return _relax().op.astype(out, ctx.attr(node, "output_type", "int64"))


@converts("Slice")
def _slice(ctx, node, x, begin, size):
    begin = [int(b) for b in np.asarray(ctx.constant(node, 1)).reshape(-1)]
    size = [int(s) for s in np.asarray(ctx.constant(node, 2)).reshape(-1)]
    shape = list(x.ty.shape)
    end = [shape[a] if s == -1 else b + s for a, (b, s) in enumerate(zip(begin, size))]
    return _relax().op.strided_slice(x, list(range(len(begin))), begin, end)


def _split_outputs(x, sizes, axis):
    """A list of Relax values, one per piece of `x` along `axis` (sizes may hold one -1)."""
    relax = _relax()
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


@converts("Split")
def _split(ctx, node, axis, x):
    axis = int(ctx.constant(node, 0))
    n = int(ctx.attr(node, "num_split"))
    (dim,) = [_static_dims(x, "Split", (axis % len(x.ty.shape),))[axis]]
    return _split_outputs(x, [dim // n] * n, axis)


@converts("SplitV")
def _split_v(ctx, node, x, sizes, axis):
    sizes = [int(s) for s in np.asarray(ctx.constant(node, 1)).reshape(-1)]
    return _split_outputs(x, sizes, int(ctx.constant(node, 2)))


from . import convert_spatial  # noqa: E402, F401  (registers its converters)
from . import convert_indexing  # noqa: E402, F401  (registers its converters)
from . import convert_training  # noqa: E402, F401  (registers its converters)
