"""The offload pipeline: mark -> partition -> convert -> compile -> replay, for one graph.

`optimize`, `enable()`'s pass, loop and branch bodies and compile_model's kept-in-TF
subgraphs all run a graph through `offload`: each node is marked (frontend.support, plus the
caller's allow/deny lists), the supported ones are clustered (partition), each cluster is
converted to Relax and compiled into tftvm ops (frontend.driver, lowering.program), a node
that refuses to convert is taken out and the rest of its cluster clustered again, the safety
net keeps TF where it is faster, and the graph is replayed with the clusters' kernels.
"""
from __future__ import annotations

import logging
import time
from collections import defaultdict

from ..frontend import support
from ..frontend.driver import to_relax
from ..lowering.program import RelaxProgram
from ..tfgraph.names import tensor_name
from ..tfgraph.order import postorder
from . import partition, replay, safety_net

log = logging.getLogger(__name__)


def offload(frozen, *, min_cluster_size=3, max_clusters=None, allow=None, deny=None, strict=False,
            target=None, progress=None, database=None, keep_faster=False, kept=None, tvm_must_win_by=None,
            memoize_weights=False, precision="f32"):  # fmt: skip
    """Mark, partition and compile the nodes of `frozen` (the main graph or a loop body):
    (clusters, reasons, run), `run` being a Python function of its inputs that replays it.
    `kept` ({node name: why}) names nodes that must stay TF nodes. `tvm_must_win_by`: with
    `keep_faster`, a cluster stays in TVM only where its own timing is this many times
    faster than TF's (ties go to TF). `memoize_weights`: what is computed from variables
    (and a body's constant weights) alone runs again only when they change (a graph that does
    not update its variables).
    `precision`: "f32", or "bf16" for products on the CPU's bf16 units (lowering/precision.py)."""
    nodes = list(frozen.graph_def.node)
    reasons = {}
    for n in nodes:
        why = support.reason_unsupported(n, frozen.graph) or (kept or {}).get(n.name)
        if why is None and allow is not None and n.op not in allow and n.op not in support.NOT_COMPUTE:
            why = "not in the allow list"
        if why is None and deny is not None and n.op in deny:
            why = "in the deny list"
        reasons[n.name] = why
    order, edges, consumers = _topology(nodes)
    by_name = {n.name: n for n in nodes}
    def cluster(names, among, **limits):
        return partition.cluster(names, among, lambda name: reasons[name] is None, min_cluster_size=min_cluster_size,
                                 counts=lambda name: by_name[name].op not in support.NOT_COMPUTE, **limits)  # fmt: skip

    # Compiled producers first: a cluster's inputs then have the dims its producers' Relax
    # programs know (_refine_shapes), where TF's shape inference has unknown ones.
    groups = _producers_first(cluster(order, edges, max_clusters=max_clusters), order, edges)
    clusters, pending = [], list(groups)
    while pending:
        group = pending.pop(0)
        members = [by_name[name] for name in group]
        inputs, outputs = replay.cluster_boundary(members, frozen, consumers)
        step = replay.ClusterStep(len(clusters), members, inputs, outputs)
        refused = _compile(step, frozen, target, strict, database, memoize_weights, precision)
        if refused is not None:  # one node refused: it stays in TF, the rest is clustered again
            reasons[refused] = step.error
            inside = set(group)
            pending[:0] = cluster([n for n in order if n in inside],
                                  [(a, b) for a, b in edges if a in inside and b in inside])  # fmt: skip
            continue
        if step.program is not None:
            _refine_shapes(step, frozen)
        if keep_faster and step.program is not None:
            safety_net.keep_faster(step, frozen, reasons, tvm_must_win_by)
        clusters.append(step)
        if progress is not None:
            progress(len(clusters), len(clusters) + len(pending), step)
    return clusters, reasons, replay.replay(frozen, clusters, _schedule(order, edges, clusters))


def _compile(step, frozen, target, strict, database, memoize_weights=False, precision="f32") -> str | None:
    """Compile `step`; on failure keep the reason in `step.error` and return the node that
    refused to convert, if one did (else the whole cluster stays in TF)."""
    start = time.perf_counter()
    refused = None
    try:
        specs = [(t, frozen.tensor(t).dtype.name, tuple(frozen.tensor(t).shape.as_list())) for t in step.inputs]
        mod = to_relax(step.nodes, specs, step.outputs)
        weights = [i for i, t in enumerate(step.inputs) if _is_weight(frozen, frozen.tensor(t))]
        step.program = RelaxProgram(mod, name=f"cluster{step.index}", target=target, database=database,
                                          weights=weights, memoize_weights=memoize_weights, precision=precision)  # fmt: skip
    except Exception as err:  # any failure leaves the cluster (or the refusing node) in TF, with the reason
        if strict:
            raise
        refused = getattr(err, "node", None)
        step.error = str(err) if refused else f"{type(err).__name__}: {err}"
        log.warning("%s stays in TF: %s", refused or f"cluster {step.index}", step.error)
    step.compile_seconds = time.perf_counter() - start
    log.info("cluster %d: %d nodes, %.2f s", step.index, len(step.nodes), step.compile_seconds)
    return refused


def _is_weight(frozen, tensor) -> bool:
    """Is `tensor` a variable's value (under enable(), a model's weights are variables) or a
    weight a loop body takes as an argument (`FrozenGraph.weights`)?"""
    while tensor.op.type == "Identity":
        tensor = tensor.op.inputs[0]
    return tensor.op.type == "ReadVariableOp" or tensor.name in frozen.weights


def _refine_shapes(step, frozen) -> None:
    """Give the graph's tensors that `step` computes the dims its Relax program knows: a
    Reshape to a shape computed from a Shape (a Dense on a 4-D input) has unknown dims for
    TF's shape inference, static ones in Relax; clusters compiled later read them as inputs."""
    for name, dims in zip(step.outputs, step.program.output_shapes):
        if dims is not None:
            try:
                frozen.tensor(name).set_shape(dims)
            except ValueError as err:  # TF's shape and Relax's disagree: keep TF's, say so
                log.warning("cluster %d: output %s is %s in Relax, %s in TF: %s", step.index, name, dims,
                            frozen.tensor(name).shape, err)  # fmt: skip


def _topology(nodes):
    names = [n.name for n in nodes]
    edges, consumers, preds = [], defaultdict(list), defaultdict(set)
    for n in nodes:
        for t in n.input:
            src = t.lstrip("^").split(":")[0]
            edges.append((src, n.name))
            preds[n.name].add(src)
            if not t.startswith("^"):
                consumers[tensor_name(t)].append(n.name)
    order = postorder(names, lambda name: sorted(preds[name]))
    return order, edges, consumers


def _producers_first(groups, order, edges) -> list:
    """`groups` (lists of node names, acyclic between them) in topological order."""
    owner = {name: i for i, group in enumerate(groups) for name in group}
    preds = defaultdict(set)
    for a, b in edges:
        sa, sb = owner.get(a, a), owner.get(b, b)
        if sa != sb:
            preds[sb].add(sa)
    steps = postorder([owner.get(name, name) for name in order], lambda step: sorted(preds[step], key=str))
    return [groups[step] for step in steps if isinstance(step, int)]


def _schedule(order, edges, clusters):
    """Topological order of steps: TF node names and compiled clusters as single steps."""
    owner = {n.name: c for c in clusters if c.program is not None for n in c.nodes}
    preds = defaultdict(set)
    for a, b in edges:
        sa, sb = owner.get(a, a), owner.get(b, b)
        if sa is not sb:
            preds[sb].add(sa)
    return postorder([owner.get(name, name) for name in order], lambda step: preds[step])
