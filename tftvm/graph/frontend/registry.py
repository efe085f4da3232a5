"""The converter table: TF op type -> the function that turns such a node into Relax.

A converter is `fn(ctx, node, *inputs)`: the conversion `Context`, the TF NodeDef and the
Relax values of the node's data inputs, in order. It returns the Relax value of the node's
output, or a list with one per output, or a `ShapeValue` where the output is (part of) a
shape. It raises `Unsupported`, with the reason, for what it does not handle; the node then
stays in TF. `register_converter` is the one way into the table, for tftvm's own converters
(frontend/ops/) and for a user's.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import numpy as np

from ..tfgraph.names import tensor_inputs, tensor_name


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

    def plain(self) -> "ShapeValue":
        """The same dims, static ones as Python ints (128 // 2 then stays an int)."""
        from tvm import tirx

        return ShapeValue([int(d) if isinstance(d, tirx.IntImm) else d for d in self], self.scalar)


def shape_tensor(ctx, value: ShapeValue, dtype: str):
    """`value` as an int tensor of `dtype` (rank 0 for a scalar dim, else rank 1), for a node
    that reads it as data (a Cast to float, a division, a TF node outside the cluster): a
    constant where every dim is static, else a small kernel to which Relax passes the
    symbolic dims it holds as arguments."""
    from tvm import relax, te, tirx

    dims = value.plain()
    if all(isinstance(d, int) for d in dims):
        return relax.const(np.array(dims[0] if value.scalar else dims, dtype), dtype)

    def compute(given):  # the dims as TIR expressions (a ShapeExpr argument: Relax passes its symbols)
        if value.scalar:
            return te.compute((), lambda: tirx.Cast(dtype, given[0]), name="shape_tensor")

        def at(i):
            out = tirx.Cast(dtype, given[-1])
            for k in reversed(range(len(given) - 1)):
                out = tirx.Select(i == k, tirx.Cast(dtype, given[k]), out)
            return out

        return te.compute((len(given),), at, name="shape_tensor")

    shape = relax.ShapeExpr([tirx.IntImm("int64", d) if isinstance(d, int) else d for d in dims])
    return ctx.bb.emit(ctx.bb.call_te(compute, shape))


CONVERTERS: dict[str, Callable] = {}


@dataclasses.dataclass(frozen=True)
class Requirements:
    """What a converter needs of a node, declared with it and checked before it runs: at
    marking time, so a node that cannot convert is never clustered (as TF-TRT validates before
    segmenting), and again by the driver."""

    constant_inputs: tuple = ()  # input indices (negative: from the last data input) that must be constants
    dtypes: frozenset | None = None  # the values of the node's "T" attribute it takes (None: any)
    data_dependent_shape: bool = False  # an output's shape depends on the values of the inputs

    def unmet(self, node, is_constant, in_vm: bool = False) -> str | None:
        """Why `node` does not meet them, or None; `is_constant(index)` says whether its data
        input `index` is a constant where it is checked. `in_vm`: the node would run in
        compile_model's VM, which allocates an output whose shape the data decides; a TvmCall
        node's output shapes must follow from its input shapes."""
        if self.data_dependent_shape and not in_vm:
            return (f"{node.op}: its output's shape depends on the data, which compile_model's VM "
                    "allows and a tftvm op (its shapes follow from its input shapes) does not")  # fmt: skip
        if self.dtypes is not None and "T" in node.attr:
            dtype = _dtype_name(node.attr["T"].type)
            if dtype not in self.dtypes:
                return f"{node.op} of {dtype}: its converter takes {sorted(self.dtypes)}"
        data = tensor_inputs(node)
        for index in self.constant_inputs:
            i = index % len(data)
            if not is_constant(i):
                return f"input {i} of {node.op} must be a constant (it is {data[i]})"
        return None


REQUIREMENTS: dict[str, Requirements] = {}


def register_converter(*op_types: str, broadcast: bool = False, on_shapes=None, constant_inputs=(), dtypes=None,
                       data_dependent_shape: bool = False, replace: bool = False):  # fmt: skip
    """Decorator: `fn(ctx, node, *inputs)` converts TF nodes of `op_types` to Relax.

    `broadcast=True`: the node's tensor inputs are elementwise operands, so a symbolic dim
    of one that sits where the first input has another symbolic dim is made that dim
    (`same_dims`) before `fn` sees them. A shape value among them is Unsupported, unless
    `on_shapes(a, b)` says what the op does to two dims (shape arithmetic: grouped-query
    attention repeats its keys with a Reshape to `shape * [1, 1, 2, 1]`): the result is then
    a shape value too (`shape_arithmetic`).
    `constant_inputs`: the indices of data inputs that must be constants (an axis, a
    permutation; -1 for the last), and `dtypes`: the element types (the node's "T") that `fn`
    takes. Both are checked before partitioning, so such a node is never clustered.
    `data_dependent_shape=True`: an output's shape depends on the data (Where), so the node
    converts in compile_model's VM only (`Context.in_vm`), never into a cluster.
    An op type that already has a converter is a ValueError unless `replace=True` (a user's
    converter taking the place of tftvm's own).
    """
    taken = [t for t in op_types if t in CONVERTERS]
    if taken and not replace:
        raise ValueError(f"TF op(s) {taken} already have a converter; pass replace=True to replace it")
    requirements = Requirements(tuple(constant_inputs), frozenset(dtypes) if dtypes is not None else None,
                                data_dependent_shape)  # fmt: skip

    def register(fn):
        converter = _broadcasting(fn, on_shapes) if broadcast else fn
        for t in op_types:
            CONVERTERS[t] = converter
            REQUIREMENTS[t] = requirements
        return fn

    return register


def _broadcasting(fn, on_shapes=None):
    @functools.wraps(fn)
    def convert(ctx, node, *inputs):
        if any(isinstance(i, ShapeValue) for i in inputs):
            if on_shapes is not None:
                try:
                    return shape_arithmetic(ctx, node, inputs, on_shapes)
                except Unsupported:  # an operand TVM computes: the dims become a tensor too
                    pass
            if "T" not in node.attr:
                raise Unsupported(f"{node.op} of a shape value")
            dtype = _dtype_name(node.attr["T"].type)
            inputs = [shape_tensor(ctx, i, dtype) if isinstance(i, ShapeValue) else i for i in inputs]
        return fn(ctx, node, *same_dims(ctx, list(inputs)))

    return convert


def shape_arithmetic(ctx, node, inputs, on_dims) -> ShapeValue:
    """`on_dims` applied dim by dim to the node's operands, shape values or constant int
    tensors of at most one axis, a scalar or one-dim operand broadcast against the other:
    a shape value (scalar where every operand is). Unsupported for other operands (a tensor
    TVM computes: its values are not known while the graph converts)."""
    operands = []
    for index, value in enumerate(inputs):
        if isinstance(value, ShapeValue):
            operands.append(value.plain())
            continue
        c = np.asarray(ctx.constant(node, index))
        if c.ndim > 1 or c.dtype.kind not in "iu":
            raise Unsupported(f"{node.op} of a shape value and a {c.dtype.name} tensor of rank {c.ndim}")
        operands.append(ShapeValue([int(v) for v in c.reshape(-1)], scalar=c.ndim == 0))
    length = max(len(o) for o in operands)
    if any(len(o) not in (1, length) for o in operands):
        raise Unsupported(f"{node.op} of shape values of lengths {[len(o) for o in operands]}")
    dims = []
    for i in range(length):
        args = [o[i] if len(o) == length else o[0] for o in operands]
        dims.append(on_dims(*args))
    return ShapeValue(dims, scalar=all(o.scalar for o in operands))


class Context:
    """What a converter may ask about its node beyond its Relax inputs."""

    def __init__(self, constants: dict, bb=None):
        self.constants = constants  # TF tensor name -> np.ndarray, for Const inputs
        self.bb = bb  # the BlockBuilder the node's bindings go to
        self.merged: list = []  # (symbolic dim, the dim it equals): see same_dims
        self.in_vm = False  # compile_model's whole graph, run by Relax's VM (not a cluster of tftvm ops)

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
        """The node's attribute `name` as a Python value (a dtype as its name), or `default`."""
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
        """The value of the node's input `index`, which must be a constant (else Unsupported)."""
        name = tensor_name(node.input[index])
        if name not in self.constants:
            raise Unsupported(f"input {index} of {node.op} must be a constant (it is {name})")
        return self.constants[name]


def _dtype_name(enum) -> str:
    import tensorflow as tf

    return tf.as_dtype(enum).name


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
