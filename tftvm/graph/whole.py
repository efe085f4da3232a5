"""A whole frozen TF graph as one Relax function; ops without a converter call back into TF.

Every node goes through the converter table (frontend/). A node that has no
converter, or whose converter refuses it, becomes a `call_pure_packed` to a
global function that runs just that node in TF, on the VM's tensors through
DLPack. Nodes joined by values the VM cannot hold (TensorList variants,
resources, strings: an RNN's loop and its lists) run together as one such call,
a TF "island". Outputs' shapes are TF's shape inference at conversion time;
dims TF does not know are bound at run time by `match_cast`.
"""
from __future__ import annotations

import dataclasses
import logging
import uuid
from collections import defaultdict

from .frontend.driver import bind_constant, bind_weight, convert_nodes, relax_param
from .frontend.registry import Context, ShapeValue, merge_symbols, shape_tensor
from .frontend.support import SUPPORTED_DTYPES, reason_unsupported
from .tfgraph.names import tensor_inputs
from .tfgraph.order import postorder

log = logging.getLogger(__name__)

_SKIP = {"NoOp"}
# What crosses between the VM and TF through DLPack; anything else stays inside an island.
CROSSABLE_DTYPES = SUPPORTED_DTYPES | {"bfloat16", "int8", "int16", "uint8", "uint16", "uint32", "uint64"}


@dataclasses.dataclass
class Fallback:
    """TF nodes that run in TF, called by the Relax VM: one node, or an island of them."""

    node: str  # the first node (the island's name)
    op: str  # its op type, or the island's op types
    reason: str
    packed_name: str  # the global function the VM calls
    feeds: list = dataclasses.field(default_factory=list)  # TF tensor names the VM passes in
    fetches: list = dataclasses.field(default_factory=list)  # TF tensor names it gets back
    nodes: list = dataclasses.field(default_factory=list)  # every node it runs
    calls: int = 0
    seconds: float = 0.0
    error: Exception | None = None  # TF's error of its last call, which the VM hands on as its own

    def __post_init__(self):
        self.nodes = self.nodes or [self.node]


def _inputs(node) -> list[str]:
    return [i.lstrip("^").split(":")[0] for i in node.input]


def _units(graph_def, island_of: dict) -> list[list]:
    """Nodes in topological order, the members of each island together as one unit."""
    nodes = {n.name: n for n in graph_def.node}
    members = defaultdict(list)
    for n in graph_def.node:
        members[island_of.get(n.name, n.name)].append(n)
    preds = defaultdict(set)
    for n in graph_def.node:
        unit = island_of.get(n.name, n.name)
        preds[unit].update(island_of.get(d, d) for d in _inputs(n) if d in nodes)
        preds[unit].discard(unit)
    return [members[u] for u in postorder(list(members), lambda unit: sorted(preds[unit]))]


def islands(frozen) -> dict:
    """node name -> island name, for the nodes joined by values the VM cannot hold.

    An island must be convex: a VM node on a path from the island back into it
    joins it, else the island would wait for its own output.
    """
    graph, nodes = frozen.graph, {n.name: n for n in frozen.graph_def.node}
    producers = {name: [d for d in _inputs(n) if d in nodes] for name, n in nodes.items()}
    consumers = defaultdict(list)
    for name, inputs in producers.items():
        for d in inputs:
            consumers[d].append(name)
    parent = {}

    def find(x):
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    def union(a, b):
        a, b = find(a), find(b)
        if a != b:
            parent[b] = a

    for n in frozen.graph_def.node:
        for t in graph.get_operation_by_name(n.name).outputs:
            if t.dtype.name not in CROSSABLE_DTYPES:
                for c in t.consumers():
                    union(n.name, c.name)
    while True:
        groups = defaultdict(set)
        for name in parent:
            groups[find(name)].add(name)
        grown = False
        for root, group in groups.items():
            between = (_reach(group, consumers) & _reach(group, producers)) - group
            for name in between:
                union(root, name)
                grown = True
        if not grown:
            return {name: find(name) for name in parent}


def _reach(group, neighbours) -> set:
    """The nodes reachable from `group` along `neighbours` (producers: its ancestors;
    consumers: its descendants)."""
    seen, stack = set(), list(group)
    while stack:
        for d in neighbours.get(stack.pop(), ()):
            if d not in seen:
                seen.add(d)
                stack.append(d)
    return seen


def to_relax(frozen, run_in_tf, deny=frozenset()):
    """(IRModule, [Fallback]): the graph as one Relax `main`.

    `run_in_tf(fallback)` is called for each node (or island) that stays in TF, to
    register the packed function the VM will call for it. Op types in `deny` stay in TF.
    """
    from tvm import relax

    bb = relax.BlockBuilder()
    params, env = [], {}
    for i, t in enumerate(frozen.inputs):
        params.append(relax_param(i, t.dtype.name, t.shape.as_list()))
        env[t.name] = params[-1]
    ctx = Context({}, bb)
    ctx.in_vm = True
    with bb.function("main", params):
        with bb.dataflow():  # a dataflow block: what FuseOps fuses
            fallbacks = _convert_nodes(ctx, frozen, env, run_in_tf, deny)
            # a shape the graph returns (tf.shape of a loop's result) as the int tensor TF gives
            outputs = [shape_tensor(ctx, env[t.name], t.dtype.name) if isinstance(env[t.name], ShapeValue)
                       else env[t.name] for t in frozen.outputs]  # fmt: skip
            out = bb.emit_output(outputs[0] if len(outputs) == 1 else relax.Tuple(outputs))
        bb.emit_func_output(out)
    return merge_symbols(bb.get(), ctx), fallbacks


def _convert_nodes(ctx, frozen, env, run_in_tf, deny) -> list[Fallback]:
    # The VM calls each fallback by a process-wide name: unique per compiled model, so
    # that models loaded side by side (same node names, say) never call each other's.
    prefix = f"tftvm.fallback.{uuid.uuid4().hex[:16]}"
    fallbacks = []

    def fall_back(node, reason):  # the policy here: the node runs in TF, called from the VM
        fallbacks.append(_fall_back(ctx, frozen, env, run_in_tf, prefix, [node], reason))

    island_of = islands(frozen)
    for unit in _units(frozen.graph_def, island_of):
        if len(unit) > 1 or unit[0].name in island_of:
            reason = _island_reason(frozen.graph, unit)
            fallbacks.append(_fall_back(ctx, frozen, env, run_in_tf, prefix, unit, reason))
            continue
        node = unit[0]
        if node.op == "Placeholder" and node.name + ":0" in frozen.weight_values:
            bind_weight(ctx, env, node.name + ":0", frozen.weight_values[node.name + ":0"])
            continue
        if node.op == "Placeholder" or node.op in _SKIP:
            continue
        if node.op == "Const":
            bind_constant(ctx, env, node)
            continue
        reason = reason_unsupported(node, frozen.graph, in_vm=True)  # the same test optimize marks nodes with
        if reason is None and node.op in deny:
            reason = "in the deny list"
        if reason is not None:
            fall_back(node, reason)
        else:
            convert_nodes(ctx, env, [node], fall_back)
    return fallbacks


def _island_reason(graph, unit) -> str:
    dtypes = sorted({t.dtype.name for n in unit for t in graph.get_operation_by_name(n.name).outputs
                     if t.dtype.name not in CROSSABLE_DTYPES})  # fmt: skip
    return f"{len(unit)} TF ops joined by values of dtype {', '.join(dtypes)}, which only TF can hold"


def _dims(t) -> list:
    """TF's static shape of `t`, each unknown dim a fresh symbolic one."""
    from tvm import tirx

    return [tirx.Var(f"{t.op.type.lower()}_{d}", "int64") if s is None else int(s)
            for d, s in enumerate(t.shape.as_list())]  # fmt: skip


def _fall_back(ctx, frozen, env, run_in_tf, prefix, unit, reason) -> Fallback:
    """Emit the call into TF for the nodes of `unit` and bind what they give back. A shape
    value it reads (kept symbolic by the converters) is passed as the int tensor TF has there."""
    graph = frozen.graph
    names = {n.name for n in unit}
    feeds, fetches, outputs = [], [], []
    for n in unit:
        for t in tensor_inputs(n):
            # An island computes its constants itself: TF's shape functions need their values.
            is_const = graph.get_tensor_by_name(t).op.type == "Const" and len(unit) > 1
            if t.split(":")[0] not in names and t in env and t not in feeds and not is_const:
                feeds.append(t)
    graph_outputs = {t.name for t in frozen.outputs}
    for n in unit:
        for t in graph.get_operation_by_name(n.name).outputs:
            used_outside = any(c.name not in names for c in t.consumers()) or t.name in graph_outputs
            if (len(unit) == 1 or used_outside) and t.dtype.name in CROSSABLE_DTYPES:
                fetches.append(t.name)
                outputs.append(t)
    ops = sorted({n.op for n in unit})
    op = unit[0].op if len(unit) == 1 else ", ".join(ops)
    fb = Fallback(unit[0].name, op, reason, f"{prefix}.{unit[0].name}", feeds, fetches,
                  [n.name for n in unit])  # fmt: skip
    run_in_tf(fb)
    if outputs:
        args = [shape_tensor(ctx, env[f], graph.get_tensor_by_name(f).dtype.name) if isinstance(env[f], ShapeValue)
                else env[f] for f in feeds]  # fmt: skip
        _call_tf(ctx.bb, env, fb, args, outputs)
    log.info("%s (%s) runs in TF: %s", fb.node, fb.op, reason)
    return fb


def _call_tf(bb, env, fb: Fallback, args, outputs) -> None:
    """Emit the call into TF and bind each output with the shape TF inferred."""
    from tvm import relax

    loose = [relax.TensorType(ndim=t.shape.rank if t.shape.rank is not None else -1, dtype=t.dtype.name)
             for t in outputs]  # fmt: skip
    ret = loose[0] if len(loose) == 1 else relax.TupleType(loose)
    call = bb.emit(relax.op.call_pure_packed(fb.packed_name, *args, ty_args=ret))
    for i, t in enumerate(outputs):
        item = call if len(outputs) == 1 else bb.emit(relax.TupleGetItem(call, i))
        if t.shape.rank is None:
            env[t.name] = item
            continue
        env[t.name] = bb.match_cast(item, relax.TensorType(_dims(t), t.dtype.name))
