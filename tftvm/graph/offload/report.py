"""The conversion report: what ran where, and why the rest stayed in TF."""
from __future__ import annotations

import dataclasses
from collections import Counter

from ..frontend.support import NOT_COMPUTE
from ..tfgraph.functions import functions_called


@dataclasses.dataclass(frozen=True)
class OpInTF:
    """A compute node that runs in TF, and why."""

    node: str
    op: str
    reason: str


@dataclasses.dataclass
class ConversionReport:
    """What ran where, as data (both `optimize` and `compile_model` give one)."""

    compute_nodes: int  # nodes that compute (not Const, Identity, NoOp, Placeholder)
    offloaded: int  # of those, how many run in TVM
    in_tf: list  # OpInTF for each compute node that runs in TF
    failed_clusters: list  # (cluster index, error) for each cluster that failed to compile

    @property
    def fraction(self) -> float:
        return self.offloaded / self.compute_nodes if self.compute_nodes else 1.0


def in_tf_with_bodies(graph_def, in_tf: list) -> list:
    """`in_tf` plus, for each of its nodes that calls functions (a While's cond and body, an
    If's branches), the compute nodes it runs in them, recursively. TvmCall nodes there are an
    optimized body's clusters: counted as offloaded, not here."""
    by_name = {n.name: n for n in graph_def.node}
    library = {f.signature.name: f for f in graph_def.library.function}
    extra = [OpInTF(f"{op.node}/{inner.name}", inner.op, f"inside {op.op} {op.node}, which runs in TF")
             for op in in_tf for f in functions_called(by_name[op.node], library)
             for inner in f.node_def if inner.op not in NOT_COMPUTE | {"TvmCall"}]  # fmt: skip
    return in_tf + extra


def summarize(frozen, clusters, reasons, body_offloaded: int = 0) -> ConversionReport:
    """The report of an `optimize` result, as data; `body_offloaded` compute nodes of loop
    bodies run in TVM."""
    compute = [n for n in frozen.graph_def.node if n.op not in NOT_COMPUTE]
    offloaded = {n.name for c in clusters if c.program is not None for n in c.nodes}
    in_failed = {n.name for c in clusters if c.program is None for n in c.nodes}
    in_tf = []
    for n in compute:
        if n.name not in offloaded:
            why = reasons.get(n.name) or ("its cluster failed to compile (above)" if n.name in in_failed
                                          else "cluster below min_cluster_size")  # fmt: skip
            in_tf.append(OpInTF(n.name, n.op, why))
    failed = [(c.index, c.error) for c in clusters if c.program is None and not c.timings]
    everything = in_tf_with_bodies(frozen.graph_def, in_tf)
    total = len(compute) + len(everything) - len(in_tf) + body_offloaded
    return ConversionReport(total, len(compute) - len(in_tf) + body_offloaded, everything, failed)


def timings_text(cluster) -> str:
    """'TVM 2.000 ms, TF 1.000 ms' for a cluster measured at one size, else each size's."""
    if len(cluster.timings) == 1:
        return str(next(iter(cluster.timings.values())))
    return "; ".join(f"None dims at {dim}: {t}" for dim, t in sorted(cluster.timings.items()))


def format_report(frozen, clusters, reasons, body_offloaded: int = 0) -> str:
    summary = summarize(frozen, clusters, reasons, body_offloaded)
    lines = [f"compute nodes: {summary.compute_nodes}, offloaded to TVM: {summary.offloaded} "
             f"({100 * summary.fraction:.1f}%)"]  # fmt: skip
    for c in clusters:
        ops = Counter(n.op for n in c.nodes if n.op not in NOT_COMPUTE)
        shapes = ", ".join(str(frozen.tensor(t).shape) for t in c.inputs)
        out_shapes = ", ".join(str(frozen.tensor(t).shape) for t in c.outputs)
        if c.program is not None:
            status = f"{len(c.program.kernels)} TVM kernels, compiled in {c.compile_seconds:.2f} s"
            status += f"; {c.program.precision.text()}" if c.program.precision.precision != "f32" else ""
            status += f"; measured {timings_text(c)}" if c.timings else ""
            if c.switch is not None:
                status += (f"; runs in TF where its inputs with None dims hold {'>=' if c.switch.tf_when_large else '<'}"
                           f" {c.switch.elements} elements, in TVM otherwise")  # fmt: skip
        elif c.timings:
            status = f"kept in TF, which is faster: {timings_text(c)}"
        else:
            status = f"stayed in TF: {c.error}"

        lines.append(f"cluster {c.index}: {sum(ops.values())} ops "
                     f"({', '.join(f'{k} x{v}' for k, v in sorted(ops.items()))}); "
                     f"inputs {shapes}; outputs {out_shapes}; {status}")  # fmt: skip
    stayed = Counter((op.op, op.reason) for op in summary.in_tf)
    for (op, why), count in sorted(stayed.items()):
        lines.append(f"stayed in TF: {op} x{count}: {why}")
    return "\n".join(lines)


def bodies_text(bodies) -> str:
    """A line per While/If body function (control_flow.Body, bodies of bodies included): how
    many of its compute nodes run in TVM, or why it stays as it is."""
    lines = []
    for b in bodies:
        head = f"{b.attr} of {b.node}"
        if b.replacement is not None:
            lines.append(f"{head}: {b.offloaded} compute nodes in TVM")
            continue
        why = b.error or next((b.reasons[n.name] for c in b.clusters for n in c.nodes if b.reasons.get(n.name)),
                              "nothing to offload")  # fmt: skip
        lines.append(f"{head}: stays in TF ({why})")
    return "\n".join(lines)
