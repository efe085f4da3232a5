"""`tftvm.optimize`: offload the TVM-convertible parts of a TF graph, keep the rest in TF."""
from __future__ import annotations

import logging
import time
from collections import defaultdict

import tensorflow as tf

from . import control_flow, convert, lower, mark, measure, partition, report, rewrite
from .freeze import freeze
from .order import postorder

log = logging.getLogger(__name__)


class Optimized(tf.Module):
    """The optimized function: call it, trace it, save it; `report()` says what ran where."""

    def __init__(self, frozen, clusters, reasons, run, input_signature, rebuild):
        super().__init__()
        self._frozen, self._clusters, self._reasons = frozen, clusters, reasons
        self._rebuild = rebuild
        structure = frozen.structured_outputs

        def call(*args):  # args are structured as the signature (e.g. a list of two tensors)
            flat = run(*tf.nest.flatten(args))
            return tf.nest.pack_sequence_as(structure, flat) if structure is not None else flat

        # An instance attribute, so tf.saved_model.save keeps it and the loaded object is callable.
        self.__call__ = tf.function(call, input_signature=list(input_signature), autograph=False)
        self.validation: list[tuple[float, float]] = []  # (max abs, max rel) error per output
        self.bodies: list = []  # control_flow.Body per While/If body function

    def __call__(self, *args):  # Python looks special methods up on the class
        return self.__dict__["__call__"](*args)

    def kernels(self) -> list:
        """The tftvm ops of every compiled cluster, the main graph's then the loop and branch
        bodies' (those that replaced their original), in cluster order: what `tftvm.tune` tunes."""
        clusters = list(self._clusters)
        clusters += [c for b in control_flow.flatten(self.bodies) if b.replacement for c in b.clusters]
        return [k for c in clusters if c.program is not None for k in c.program.kernels]

    def rebuilt(self, **options) -> "Optimized":
        """`optimize` run again on the same function and signature with `options` changed
        (e.g. database=): the kernel cache makes the unchanged kernels cheap."""
        return self._rebuild(**options)

    def summary(self) -> report.ConversionReport:
        """What ran where, as data: compute nodes, offloaded count, TF ops with reasons,
        failed clusters with errors."""
        return report.summarize(self._frozen, self._clusters, self._reasons, self._body_offloaded())

    def _body_offloaded(self) -> int:
        return sum(b.offloaded for b in control_flow.flatten(self.bodies))

    def report(self) -> str:
        text = report.format_report(self._frozen, self._clusters, self._reasons, self._body_offloaded())
        text += "\n" + report.bodies_text(control_flow.flatten(self.bodies)) if self.bodies else ""
        for i, (abs_err, rel_err) in enumerate(self.validation):
            text += f"\nvalidation: output {i}: max abs error {abs_err:.3g}, max rel error {rel_err:.3g}"
        return text


def optimize(fn, input_signature=None, *, cache_size: int = 8, min_cluster_size: int = 3,
             max_clusters: int | None = None, allow: set | None = None, deny: set | None = None, strict: bool = False,
             target=None, progress=None, validate=False, database=None, keep_faster=None) -> Optimized:  # fmt: skip
    """Cluster the supported nodes of `fn`'s graph, compile each cluster with TVM, and
    return a callable that runs the clusters as tftvm ops and everything else in TF.

    `progress(done, total, step)` is called after each cluster is compiled.
    `validate=True` (random inputs, unknown dims = 2) or a list of inputs runs the
    original and the optimized function side by side; the errors go into the report.
    `database` (default $TFTVM_TUNING_DB): MetaSchedule records from `tftvm.tune`;
    kernels with a record compile their tuned schedule.
    `keep_faster` (default True, or $TFTVM_KEEP_FASTER=0 for False): time each compiled
    cluster in TVM and in TF (`None` dims at 1, and at 8 where it has some) and keep TF's
    where it is faster; where that depends on the size, the graph switches between them
    per call by the size of the cluster's inputs. The report gives the times. The timings
    are cached with the kernels.
    Without `input_signature`, each new input signature compiles a variant (LRU of
    `cache_size`); a second shape of the same pattern compiles a symbolic variant.
    """
    options = dict(min_cluster_size=min_cluster_size, max_clusters=max_clusters, allow=allow, deny=deny,
                   strict=strict, target=target, progress=progress, database=database,
                   keep_faster=measure.enabled(keep_faster))  # fmt: skip
    if input_signature is None:
        from .adaptive import AdaptiveOptimized

        return AdaptiveOptimized(fn, lambda sig, **changed: optimize(fn, sig, **{**options, **changed}), cache_size)
    frozen = freeze(fn, input_signature)
    frozen, bodies = control_flow.optimize_bodies(frozen, lambda body: offload(body, **{**options, "progress": None}),
                                                  strict=strict)  # fmt: skip
    clusters, reasons, run = offload(frozen, **options)
    optimized = Optimized(frozen, clusters, reasons, run, input_signature,
                          lambda **changed: optimize(fn, input_signature, **{**options, **changed}))  # fmt: skip
    optimized.bodies = bodies  # control_flow.Body per While/If body function
    if validate is not False:
        inputs = _random_inputs(input_signature) if validate is True else list(validate)
        optimized.validation = _compare(fn, optimized, inputs)
    return optimized


def offload(frozen, *, min_cluster_size=3, max_clusters=None, allow=None, deny=None, strict=False,
            target=None, progress=None, database=None, keep_faster=False, kept=None, tvm_must_win_by=None,
            memoize_weights=False):  # fmt: skip
    """Mark, partition and compile the nodes of `frozen` (the main graph or a loop body):
    (clusters, reasons, run), `run` being a Python function of its inputs that replays it.
    `kept` ({node name: why}) names nodes that must stay TF nodes. `tvm_must_win_by`: with
    `keep_faster`, a cluster stays in TVM only where its own timing is this many times
    faster than TF's (ties go to TF). `memoize_weights`: what is computed from variables
    alone runs again only when they change (a graph that does not update its variables)."""
    nodes = list(frozen.graph_def.node)
    reasons = {}
    for n in nodes:
        why = mark.reason_unsupported(n, frozen.graph) or (kept or {}).get(n.name)
        if why is None and allow is not None and n.op not in allow and n.op not in mark.NOT_COMPUTE:
            why = "not in the allow list"
        if why is None and deny is not None and n.op in deny:
            why = "in the deny list"
        reasons[n.name] = why
    order, edges, consumers = _topology(nodes)
    by_name = {n.name: n for n in nodes}
    def cluster(names, among, **limits):
        return partition.cluster(names, among, lambda name: reasons[name] is None, min_cluster_size=min_cluster_size,
                                 counts=lambda name: by_name[name].op not in mark.NOT_COMPUTE, **limits)  # fmt: skip

    # Compiled producers first: a cluster's inputs then have the dims its producers' Relax
    # programs know (_refine_shapes), where TF's shape inference has unknown ones.
    groups = _producers_first(cluster(order, edges, max_clusters=max_clusters), order, edges)
    clusters, pending = [], list(groups)
    while pending:
        group = pending.pop(0)
        members = [by_name[name] for name in group]
        inputs, outputs = rewrite.cluster_boundary(members, frozen, consumers)
        step = rewrite.ClusterStep(len(clusters), members, inputs, outputs)
        refused = _compile(step, frozen, target, strict, database, memoize_weights)
        if refused is not None:  # one node refused: it stays in TF, the rest is clustered again
            reasons[refused] = step.error
            inside = set(group)
            pending[:0] = cluster([n for n in order if n in inside],
                                  [(a, b) for a, b in edges if a in inside and b in inside])  # fmt: skip
            continue
        if step.program is not None:
            _refine_shapes(step, frozen)
        if keep_faster and step.program is not None:
            _keep_faster(step, frozen, reasons, tvm_must_win_by)
        clusters.append(step)
        if progress is not None:
            progress(len(clusters), len(clusters) + len(pending), step)
    return clusters, reasons, rewrite.replay(frozen, clusters, _schedule(order, edges, clusters))


def _random_inputs(input_signature) -> list:
    import numpy as np

    rng = np.random.default_rng(0)

    def make(spec):
        shape = [2 if d is None else d for d in spec.shape.as_list()]
        if spec.dtype.is_floating:
            return tf.constant(rng.standard_normal(shape), dtype=spec.dtype)
        return tf.constant(rng.integers(0, 4, shape), dtype=spec.dtype)

    return tf.nest.map_structure(make, list(input_signature))


def _compare(fn, optimized, inputs) -> list[tuple[float, float]]:
    import numpy as np

    want = tf.nest.flatten(fn(*inputs))
    got = tf.nest.flatten(optimized(*inputs))
    errors = []
    for w, g in zip(want, got):
        w, g = np.asarray(w, dtype=np.float64), np.asarray(g, dtype=np.float64)
        abs_err = float(np.max(np.abs(w - g))) if w.size else 0.0
        rel_err = float(np.max(np.abs(w - g) / np.maximum(np.abs(w), 1e-12))) if w.size else 0.0
        errors.append((abs_err, rel_err))
    return errors


def _compile(step, frozen, target, strict, database, memoize_weights=False) -> str | None:
    """Compile `step`; on failure keep the reason in `step.error` and return the node that
    refused to convert, if one did (else the whole cluster stays in TF)."""
    start = time.perf_counter()
    refused = None
    try:
        specs = [(t, frozen.tensor(t).dtype.name, tuple(frozen.tensor(t).shape.as_list())) for t in step.inputs]
        mod = convert.to_relax(step.nodes, specs, step.outputs)
        weights = [i for i, t in enumerate(step.inputs) if _reads_a_variable(frozen.tensor(t))]
        step.program = lower.RelaxProgram(mod, name=f"cluster{step.index}", target=target, database=database,
                                          weights=weights, memoize_weights=memoize_weights)  # fmt: skip
    except Exception as err:  # any failure leaves the cluster (or the refusing node) in TF, with the reason
        if strict:
            raise
        refused = getattr(err, "node", None)
        step.error = str(err) if refused else f"{type(err).__name__}: {err}"
        log.warning("%s stays in TF: %s", refused or f"cluster {step.index}", step.error)
    step.compile_seconds = time.perf_counter() - start
    log.info("cluster %d: %d nodes, %.2f s", step.index, len(step.nodes), step.compile_seconds)
    return refused


def _reads_a_variable(tensor) -> bool:
    """Is `tensor` a variable's value (under enable(), a model's weights are variables)?"""
    while tensor.op.type == "Identity":
        tensor = tensor.op.inputs[0]
    return tensor.op.type == "ReadVariableOp"


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


def _keep_faster(step, frozen, reasons, tvm_must_win_by=None) -> None:
    """The safety net: a cluster that TF runs faster than its TVM kernels stays in TF; one
    with `None` dims is timed with them at 1 and at 8, and where the verdicts differ, both
    sides stay in the graph behind a switch on the inputs' size. With `tvm_must_win_by`,
    TVM stays only where it is that many times faster at every size measured."""
    dynamic = measure.dynamic_inputs(step, frozen)
    graph_def = measure.subgraph(step, frozen)  # the cluster's constants: copied once, not per size
    for dim in [measure.MEASURE_DIM] + ([measure.LARGE_DIM] if dynamic else []):
        try:
            step.timings[dim] = measure.compare(step, frozen, graph_def, dim)
        except Exception as err:  # a failed measurement keeps TVM, which is correct, just unmeasured
            log.warning("cluster %d could not be timed against TF with None dims at %d (%s); that size runs "
                        "as the others do", step.index, dim, err)  # fmt: skip
    if not step.timings:
        return
    times = report.timings_text(step)
    if tvm_must_win_by is not None:
        if not all(t.tvm_seconds * tvm_must_win_by < t.tf_seconds for t in step.timings.values()):
            log.info("cluster %d stays in TF: TVM is not %.2fx as fast (%s)", step.index, tvm_must_win_by, times)
            step.program = None
            for n in step.nodes:
                reasons[n.name] = f"TVM is not {tvm_must_win_by:.2f}x as fast as TF, as a training step asks ({times})"
        return
    step.switch = measure.size_switch(step, frozen, graph_def, dynamic)
    if step.switch is not None:
        log.info("cluster %d: TF is faster %s, TVM otherwise (%s)", step.index,
                 "for large inputs" if step.switch.tf_when_large else "for small inputs", times)  # fmt: skip
    elif all(t.tf_faster for t in step.timings.values()):
        log.info("cluster %d stays in TF, which is faster: %s", step.index, times)
        step.program = None
        for n in step.nodes:
            reasons[n.name] = f"TF runs its cluster faster ({times})"


def _topology(nodes):
    names = [n.name for n in nodes]
    edges, consumers, preds = [], defaultdict(list), defaultdict(set)
    for n in nodes:
        for t in n.input:
            src = t.lstrip("^").split(":")[0]
            edges.append((src, n.name))
            preds[n.name].add(src)
            if not t.startswith("^"):
                consumers[t if ":" in t else t + ":0"].append(n.name)
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
