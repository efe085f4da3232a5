"""TF nodes -> Relax: one short converter per TF op type, all in one table.

A converter gets the conversion context, the TF NodeDef and the Relax values
of its data inputs, and returns the Relax value of its output(s). It raises
Unsupported, with a reason, for attributes it does not handle; the node then
stays in TF.
"""
from __future__ import annotations

from typing import Callable

import numpy as np


class Unsupported(Exception):
    """This node cannot be converted; the message says why."""


CONVERTERS: dict[str, Callable] = {}


def converts(*op_types: str):
    def register(fn):
        for t in op_types:
            CONVERTERS[t] = fn
        return fn

    return register


class Context:
    """What a converter may ask about its node beyond its Relax inputs."""

    def __init__(self, constants: dict):
        self._constants = constants  # TF tensor name -> np.ndarray, for Const inputs

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
        name = _tensor_name(node.input[index])
        if name not in self._constants:
            raise Unsupported(f"input {index} of {node.op} must be a constant (it is {name})")
        return self._constants[name]


def _tensor_name(name: str) -> str:
    return name if ":" in name else name + ":0"


def _dtype_name(enum) -> str:
    import tensorflow as tf

    return tf.as_dtype(enum).name


def _relax():
    from tvm import relax

    return relax


def _binary(fn_name):
    def convert(ctx, node, x, y):
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
for _tf, _rx in {"Relu": "nn.relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp",
                 "Log": "log", "Sqrt": "sqrt", "Rsqrt": "rsqrt", "Neg": "negative", "Abs": "abs",
                 "Square": "square", "Erf": "erf"}.items():  # fmt: skip
    CONVERTERS[_tf] = _unary(_rx)


@converts("Identity")
def _identity(ctx, node, x):
    return x


@converts("SquaredDifference")
def _squared_difference(ctx, node, x, y):
    op = _relax().op
    return op.square(op.subtract(x, y))


@converts("Relu6")
def _relu6(ctx, node, x):
    return _relax().op.clip(x, 0, 6)


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
    if ctx.attr(node, "data_format", "NHWC") != "NHWC":
        raise Unsupported("BiasAdd with data_format NCHW")
    return _relax().op.add(x, bias)


@converts("MatMul")
def _matmul(ctx, node, a, b):
    op = _relax().op
    if ctx.attr(node, "transpose_a", False):
        a = op.permute_dims(a, [1, 0])
    if ctx.attr(node, "transpose_b", False):
        b = op.permute_dims(b, [1, 0])
    return op.matmul(a, b)


@converts("BatchMatMulV2", "BatchMatMulV3")
def _batch_matmul(ctx, node, a, b):
    op = _relax().op

    def swap_last(t):
        n = len(t.ty.shape)
        return op.permute_dims(t, list(range(n - 2)) + [n - 1, n - 2])

    if ctx.attr(node, "adj_x", False):
        a = swap_last(a)
    if ctx.attr(node, "adj_y", False):
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
        return getattr(_relax().op, fn_name)(x, axis=axis, keepdims=bool(ctx.attr(node, "keep_dims", False)))

    return convert


for _tf, _rx in {"Sum": "sum", "Mean": "mean", "Max": "max", "Min": "min", "Prod": "prod"}.items():
    CONVERTERS[_tf] = _reduction(_rx)


@converts("Reshape")
def _reshape(ctx, node, x, shape):
    return _relax().op.reshape(x, [int(d) for d in ctx.constant(node, 1)])


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
    from tvm import relax, tirx

    constants = dict(constants or {})
    for node in nodes:
        if node.op == "Const":
            constants[node.name + ":0"] = tf.make_ndarray(node.attr["value"].tensor)
    ctx = Context(constants)
    bb = relax.BlockBuilder()
    params, env = [], {}
    for i, (name, dtype, shape) in enumerate(inputs):
        dims = [tirx.Var(f"d{i}_{d}", "int64") if s is None else int(s) for d, s in enumerate(shape)]
        params.append(relax.Var(f"in{i}", relax.TensorType(dims, dtype)))
        env[_tensor_name(name)] = params[-1]
    with bb.function("main", params):
        with bb.dataflow():
            for node in nodes:
                if node.op == "Const":
                    env[node.name + ":0"] = relax.const(constants[node.name + ":0"])
                    continue
                convert = CONVERTERS.get(node.op)
                if convert is None:
                    raise Unsupported(f"no converter for TF op {node.op}")
                args = [env[_tensor_name(i)] for i in node.input if not i.startswith("^")]
                env[node.name + ":0"] = bb.emit(convert(ctx, node, *args))
            result = [env[_tensor_name(o)] for o in outputs]
            out = bb.emit_output(result[0] if len(result) == 1 else relax.Tuple(result))
        bb.emit_func_output(out)
    return bb.get()
