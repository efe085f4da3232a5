"""The conversion report: what ran where, and why the rest stayed in TF."""
from __future__ import annotations

from collections import Counter

from .mark import NOT_COMPUTE


def format_report(frozen, clusters, reasons) -> str:
    compute = [n for n in frozen.graph_def.node if n.op not in NOT_COMPUTE]
    offloaded = {n.name for c in clusters if c.program is not None for n in c.nodes}
    in_failed = {n.name for c in clusters if c.program is None for n in c.nodes}
    done = [n for n in compute if n.name in offloaded]
    pct = 100.0 * len(done) / max(1, len(compute))
    lines = [f"compute nodes: {len(compute)}, offloaded to TVM: {len(done)} ({pct:.1f}%)"]
    for c in clusters:
        ops = Counter(n.op for n in c.nodes if n.op not in NOT_COMPUTE)
        shapes = ", ".join(str(frozen.tensor(t).shape) for t in c.inputs)
        out_shapes = ", ".join(str(frozen.tensor(t).shape) for t in c.outputs)
        status = (f"{len(c.program.kernels)} TVM kernels, compiled in {c.compile_seconds:.2f} s"
                  if c.program is not None else f"stayed in TF: {c.error}")  # fmt: skip
        lines.append(f"cluster {c.index}: {sum(ops.values())} ops "
                     f"({', '.join(f'{k} x{v}' for k, v in sorted(ops.items()))}); "
                     f"inputs {shapes}; outputs {out_shapes}; {status}")  # fmt: skip
    stayed = Counter((n.op, reasons[n.name]) for n in compute
                     if n.name not in offloaded and reasons.get(n.name))  # fmt: skip
    for n in compute:
        if n.name not in offloaded and not reasons.get(n.name):
            why = "its cluster failed to compile (above)" if n.name in in_failed else "cluster below min_cluster_size"
            stayed[(n.op, why)] += 1
    for (op, why), count in sorted(stayed.items()):
        lines.append(f"stayed in TF: {op} x{count}: {why}")
    return "\n".join(lines)
