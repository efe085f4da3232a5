"""A frozen graph's weights apart from it: Placeholders in the graph, values beside it.

A frozen model's weights are Const nodes, and every holder of the graph holds a copy:
the GraphDef, the tf.Graph imported from it, Grappler's working copies, the FuncGraph and
function library of a tf.function that runs it, the Relax module converted from it, the
TVM library compiled from that. For an LLM that is its weights many times over. Split
apart, each weight is a Placeholder of its dtype and shape, and its value is kept once,
as a TF tensor, which TF functions take as an input and TVM reads through DLPack (zero
copy): the graph's holders hold only the graph.
"""
from __future__ import annotations

# A constant this large is a model's weight, not a shape or an axis.
WEIGHT_BYTES = 1 << 20

# Weights TVM reads through DLPack; a constant of another dtype (strings, say) stays a Const.
_SHARED_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
                            "uint8", "uint16", "uint32", "uint64", "bool"})  # fmt: skip


def split(graph_def) -> tuple:
    """(a copy of `graph_def` whose weights are Placeholders, {node name: the weight's Const
    NodeDef}). A weight: a Const of `WEIGHT_BYTES` or more, of a dtype TVM shares, with no
    control input."""
    light = type(graph_def)()
    light.versions.CopyFrom(graph_def.versions)
    light.library.CopyFrom(graph_def.library)
    weights = {}
    for node in graph_def.node:
        if not _is_weight(node):
            light.node.add().CopyFrom(node)
            continue
        weights[node.name] = node
        proto = node.attr["value"].tensor
        placeholder = light.node.add(name=node.name, op="Placeholder", device=node.device)
        placeholder.attr["dtype"].type = proto.dtype
        placeholder.attr["shape"].shape.CopyFrom(proto.tensor_shape)
    return light, weights


def _is_weight(node) -> bool:
    import tensorflow as tf

    if node.op != "Const" or any(i.startswith("^") for i in node.input):
        return False
    value = node.attr["value"].tensor
    dtype = tf.as_dtype(value.dtype)
    if dtype.name not in _SHARED_DTYPES:
        return False
    return tf.TensorShape(value.tensor_shape).num_elements() * dtype.size >= WEIGHT_BYTES


def restored(graph_def, weights: dict):
    """`graph_def` (changed in place) with the Placeholders of `weights` (split's) Consts again."""
    for node in graph_def.node:
        if node.op == "Placeholder" and node.name in weights:
            node.CopyFrom(weights[node.name])
    return graph_def


def values(weights: dict) -> dict:
    """{tensor name: TF tensor} of `weights` (split's Const NodeDefs), in host memory, where
    TVM's CPU kernels read them (a TF with a GPU would place them there)."""
    import tensorflow as tf

    with tf.device("/CPU:0"):
        return {name + ":0": tf.constant(tf.make_ndarray(node.attr["value"].tensor)) for name, node in weights.items()}


def with_constants(graph_def, weight_values: dict):
    """A copy of `graph_def` with the Placeholders of `weight_values` ({tensor name: TF
    tensor}) Consts of those values: the frozen graph TF would write."""
    import tensorflow as tf

    out = type(graph_def)()
    out.CopyFrom(graph_def)
    for node in out.node:
        value = weight_values.get(node.name + ":0")
        if value is None or node.op != "Placeholder":
            continue
        const = type(node)(name=node.name, op="Const", device=node.device)
        const.attr["dtype"].type = value.dtype.as_datatype_enum
        const.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value.numpy()))
        node.CopyFrom(const)
    return out
