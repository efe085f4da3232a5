"""A whole frozen TF graph as one Relax function; ops without a converter call back into TF.

Every node goes through the converter table (convert.py). A node that has no
converter, or whose converter refuses it, becomes a `call_pure_packed` to a
global function that runs just that node in TF (the frozen graph pruned to it),
on the VM's tensors through DLPack. Its outputs' shapes are TF's shape inference
at conversion time; dims TF does not know are bound at run time by `match_cast`.
"""
from __future__ import annotations

import dataclasses
import uuid
import logging

from . import convert
from .mark import SUPPORTED_DTYPES, reason_unsupported

log = logging.getLogger(__name__)

_SKIP = {"NoOp"}


@dataclasses.dataclass
class Fallback:
    """One TF node that runs in TF, called by the Relax VM."""

    node: str
    op: str
    reason: str
    packed_name: str  # the global function the VM calls
    feeds: list = dataclasses.field(default_factory=list)  # TF tensor names the VM passes in
    fetches: list = dataclasses.field(default_factory=list)  # TF tensor names it gets back
    calls: int = 0
    seconds: float = 0.0


def topological(graph_def) -> list:
    """The graph's nodes, each after all of its inputs (data and control)."""
    nodes = {n.name: n for n in graph_def.node}
    order, state = [], {}
    for start in graph_def.node:
        stack = [(start.name, False)]
        while stack:
            name, done = stack.pop()
            if done:
                state[name] = "done"
                order.append(nodes[name])
                continue
            if state.get(name):
                continue
            state[name] = "visiting"
            stack.append((name, True))
            for i in nodes[name].input:
                dep = i.lstrip("^").split(":")[0]
                if dep in nodes and not state.get(dep):
                    stack.append((dep, False))
    return order


def to_relax(frozen, run_in_tf):
    """(IRModule, [Fallback]): the graph as one Relax `main`.

    `run_in_tf(fallback)` is called for each node that stays in TF, to register
    the packed function the VM will call for it.
    """
    from tvm import relax

    bb = relax.BlockBuilder()
    params, env = [], {}
    for i, t in enumerate(frozen.inputs):
        params.append(convert.relax_param(i, t.dtype.name, t.shape.as_list()))
        env[t.name] = params[-1]
    with bb.function("main", params):
        with bb.dataflow():  # a dataflow block: what FuseOps fuses
            fallbacks = _convert_nodes(bb, frozen, env, run_in_tf)
            outputs = [env[t.name] for t in frozen.outputs]
            out = bb.emit_output(outputs[0] if len(outputs) == 1 else relax.Tuple(outputs))
        bb.emit_func_output(out)
    return bb.get(), fallbacks


def _convert_nodes(bb, frozen, env, run_in_tf) -> list[Fallback]:
    import tensorflow as tf
    from tvm import relax

    # The VM calls each fallback by a process-wide name: unique per compiled model, so
    # that models loaded side by side (same node names, say) never call each other's.
    prefix = f"tftvm.fallback.{uuid.uuid4().hex[:16]}"
    graph = frozen.graph
    constants: dict = {}
    ctx = convert.Context(constants)
    fallbacks = []
    for node in topological(frozen.graph_def):
        if node.op == "Placeholder" or node.op in _SKIP:
            continue
        if node.op == "Const":
            value = tf.make_ndarray(node.attr["value"].tensor)
            constants[node.name + ":0"] = value
            if value.dtype.name in SUPPORTED_DTYPES:
                env[node.name + ":0"] = relax.const(value)
            continue
        reason = reason_unsupported(node, graph)  # the same test optimize marks nodes with
        data_inputs = [convert._tensor_name(i) for i in node.input if not i.startswith("^")]
        if reason is None:
            try:
                value = convert.CONVERTERS[node.op](ctx, node, *[env[i] for i in data_inputs])
                convert.bind_outputs(bb, env, node, value)
                continue
            except convert.Unsupported as err:
                reason = str(err)
            except KeyError as err:  # an input only TF can produce (e.g. a string)
                reason = f"input {err} is not a TVM value"
        op = graph.get_operation_by_name(node.name)
        feeds = [i for i in data_inputs if i in env]
        fb = Fallback(node.name, node.op, reason, f"{prefix}.{node.name}",
                      feeds, [t.name for t in op.outputs])  # fmt: skip
        run_in_tf(fb)
        fallbacks.append(fb)
        _call_tf(bb, env, fb, [_materialize(env[f]) for f in feeds], op.outputs)
        log.info("%s (%s) runs in TF: %s", node.name, node.op, reason)
    return fallbacks


def _materialize(value):
    """A value the VM can pass to TF: shape values (kept symbolic by the converters) become tensors."""
    from tvm import relax

    if isinstance(value, convert.ShapeValue):
        tensor = relax.op.shape_to_tensor(relax.ShapeExpr(list(value)))
        return relax.op.reshape(tensor, []) if value.scalar else tensor
    return value


def _call_tf(bb, env, fb: Fallback, args, outputs) -> None:
    """Emit the call into TF and bind each output with the shape TF inferred."""
    from tvm import relax, tirx

    loose = [relax.TensorType(ndim=t.shape.rank if t.shape.rank is not None else -1, dtype=t.dtype.name)
             for t in outputs]  # fmt: skip
    ret = loose[0] if len(loose) == 1 else relax.TupleType(loose)
    call = bb.emit(relax.op.call_pure_packed(fb.packed_name, *args, ty_args=ret))
    for i, t in enumerate(outputs):
        item = call if len(outputs) == 1 else bb.emit(relax.TupleGetItem(call, i))
        if t.shape.rank is None:
            env[t.name] = item
            continue
        dims = [tirx.Var(f"{fb.op.lower()}{i}_{d}", "int64") if s is None else int(s)
                for d, s in enumerate(t.shape.as_list())]  # fmt: skip
        env[t.name] = bb.match_cast(item, relax.TensorType(dims, t.dtype.name))
