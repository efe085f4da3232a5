"""Support: can TVM take this node? Each answer comes with the reason, decided before
partitioning from the node's op, dtypes, ranks and device."""
from __future__ import annotations

from . import ops  # noqa: F401  (fills the converter table)
from .registry import CONVERTERS, REQUIREMENTS

SUPPORTED_DTYPES = {"float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
                    "uint8", "uint16", "uint32", "uint64", "bool"}  # fmt: skip
# Not counted as compute (cluster sizes, the report's share): a variable's read is to a graph
# that keeps its variables (enable()'s pass, loop bodies) what a Const is to a frozen one.
NOT_COMPUTE = {"Const", "Identity", "NoOp", "Placeholder", "ReadVariableOp"}


def reason_unsupported(node, graph, in_vm: bool = False) -> str | None:
    """None if the node can go to TVM, else why not. `in_vm`: into compile_model's VM, which
    runs ops whose output shapes depend on the data (Requirements.data_dependent_shape)."""
    if node.op == "Placeholder":
        return "graph input"
    if node.op not in CONVERTERS and node.op != "Const":
        return f"no converter for {node.op}"
    op = graph.get_operation_by_name(node.name)
    fetched = {t.name for t in getattr(graph, "outputs", [])}
    # An output nothing reads does not count: FusedBatchNormV3's 6th (reserve_space_3, for
    # its gradient) has unknown rank, and tf_keras' batch norms left whole CNNs in TF for it.
    used = [t for t in op.outputs if t.consumers() or t.name in fetched]
    for t in list(op.inputs) + used:
        if t.dtype.name not in SUPPORTED_DTYPES:
            return f"dtype {t.dtype.name}"
        if t.shape.rank is None:
            return "unknown rank"
    if op.device and "CPU" not in op.device.upper():
        return f"placed on {op.device}"
    if node.op in REQUIREMENTS:
        return REQUIREMENTS[node.op].unmet(node, lambda i: op.inputs[i].op.type == "Const", in_vm)
    return None
