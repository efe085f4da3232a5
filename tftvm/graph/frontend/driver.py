"""The driver: TF nodes -> a Relax function, one converter call per node.

One loop, `convert_nodes`, with the caller's policy for a node that cannot convert:
`to_relax` converts a cluster whole, so the first such node makes it raise Unsupported naming
that node (optimize's and enable()'s partitioner then takes the node out and clusters the rest
again); compile_model's whole-graph conversion (graph/whole.py) runs that node in TF instead.
"""
from __future__ import annotations

import logging

from ..tfgraph.names import tensor_inputs, tensor_name
from . import ops  # noqa: F401  (fills the converter table)
from .registry import (CONVERTERS, REQUIREMENTS, Context, Requirements, ShapeValue, Unsupported, merge_symbols,
                       shape_tensor)
from .support import SUPPORTED_DTYPES

log = logging.getLogger(__name__)


def to_relax(nodes, inputs, outputs, constants=None):
    """A Relax IRModule whose main computes `outputs` from `inputs` over `nodes`, or
    Unsupported naming the first node that cannot convert (the policy of a cluster: it is
    converted whole or not at all). A shape value read outside the cluster becomes an int
    tensor (`_as_tensor`).

    nodes: NodeDefs in topological order; inputs: (tensor name, dtype, shape)
    with None for unknown dims; outputs: tensor names. Const nodes among `nodes`
    become Relax constants; `constants` (tensor name -> value) are known beside them.
    """
    from tvm import relax

    bb = relax.BlockBuilder()
    ctx = Context(dict(constants or {}), bb)
    params, env = [], {}
    for i, (name, dtype, shape) in enumerate(inputs):
        params.append(relax_param(i, dtype, shape))
        env[tensor_name(name)] = params[-1]

    def refuse(node, why):
        raise Unsupported(why, node.name)

    by_name = {n.name: n for n in nodes}
    with bb.function("main", params):
        with bb.dataflow():
            convert_nodes(ctx, env, nodes, refuse)
            result = [_as_tensor(ctx, env, tensor_name(o), by_name) for o in outputs]
            out = bb.emit_output(result[0] if len(result) == 1 else relax.Tuple(result))
        bb.emit_func_output(out)
    return merge_symbols(bb.get(), ctx)


def _as_tensor(ctx, env: dict, name: str, by_name: dict):
    """The Relax value of cluster output `name`; a shape value there (dims, Python-side)
    becomes an int tensor of the TF output's dtype, which TF nodes outside read. Where that
    dtype is not known, Unsupported naming the producer: it stays in TF, the rest is
    clustered again."""
    value = env[name]
    if not isinstance(value, ShapeValue):
        return value
    producer = name.rsplit(":", 1)[0]
    node = by_name.get(producer)
    dtype = next((ctx.attr(node, a) for a in ("out_type", "DstT", "T", "Tparams") if node is not None and a in node.attr),
                 None)  # fmt: skip
    if dtype not in ("int32", "int64"):
        raise Unsupported(f"its output {name} is a shape value of unknown dtype that TF nodes outside the cluster read",
                          producer)  # fmt: skip
    return shape_tensor(ctx, value, dtype)


def convert_nodes(ctx, env: dict, nodes, fall_back) -> None:
    """Convert `nodes` (in topological order) into `ctx.bb`'s function, their outputs into
    `env`. A node that cannot convert goes to `fall_back(node, why)`: the caller's policy
    (a cluster raises; compile_model's whole graph runs the node in TF)."""
    for node in nodes:
        if node.op == "Const":
            bind_constant(ctx, env, node)
            continue
        if node.op not in CONVERTERS:
            why = f"no converter for TF op {node.op}"
        else:
            why = REQUIREMENTS.get(node.op, Requirements()).unmet(
                node, lambda i: tensor_name(node.input[i]) in ctx.constants, ctx.in_vm)
            why = why or convert_node(ctx, env, node)
        if why is not None:
            fall_back(node, why)


def bind_constant(ctx, env: dict, node) -> None:
    """A Const node's value, known to converters (ctx.constant) and, where TVM can hold its
    dtype, a Relax constant in `env`."""
    import tensorflow as tf
    from tvm import relax

    value = tf.make_ndarray(node.attr["value"].tensor)
    ctx.constants[node.name + ":0"] = value
    if value.dtype.name in SUPPORTED_DTYPES:
        # relax.const makes float64 arrays float32 unless told the dtype.
        env[node.name + ":0"] = relax.const(value, value.dtype.name)


def bind_weight(ctx, env: dict, name: str, value) -> None:
    """Weight `value` (a TF tensor held beside the graph, at Placeholder tensor `name`) bound
    as bind_constant binds a Const's value, sharing its memory (DLPack): the Relax constant
    and what converters read are views of the TF tensor, not copies of a model's weights."""
    import numpy as np
    from tvm import relax

    from ...tensors import to_tvm

    data = to_tvm(value)
    ctx.constants[name] = np.from_dlpack(data)
    env[name] = relax.const(data)


def convert_node(ctx, env: dict, node) -> str | None:
    """Convert `node` (its op has a converter) into `ctx.bb`'s function, its outputs into `env`:
    None on success, else why it stays in TF. A converter's failure costs this node, never
    its cluster or model."""
    data_inputs = tensor_inputs(node)
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

