"""Freeze: trace a function or model for a signature, variables become constants."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class FrozenGraph:
    graph: object  # tf.Graph of the frozen concrete function
    graph_def: object
    inputs: list  # input tensors (placeholders), in signature order
    outputs: list  # output tensors, flattened
    structured_outputs: object  # the function's output structure

    def tensor(self, name: str):
        return self.graph.get_tensor_by_name(name)


def freeze(fn, input_signature) -> FrozenGraph:
    """Trace `fn` (tf.function, tf.Module with __call__, Keras model, or plain callable),
    turn variables into constants and fold what is constant (static shapes included)."""
    import tensorflow as tf
    from tensorflow.python.framework import convert_to_constants

    from .functionalize import as_tf2
    from .inline import inline_calls

    function = fn if hasattr(fn, "get_concrete_function") else tf.function(fn)
    concrete = function.get_concrete_function(*input_signature)
    # While/If stay functional nodes (RNN layers emit them): one node each, acyclic.
    frozen = convert_to_constants.convert_variables_to_constants_v2(concrete, lower_control_flow=False)
    inputs = [t.name for t in frozen.inputs]
    outputs = [t.name for t in frozen.outputs]
    # nested jit calls inlined too; TF1 loops and TensorArrays in TF2's forms
    traced = frozen.graph.as_graph_def()
    rewritten = as_tf2(inline_calls(traced))
    graph_def = fold_constants(frozen.graph if rewritten is traced else imported(rewritten), outputs)
    graph = imported(graph_def)
    return FrozenGraph(graph, graph_def, [graph.get_tensor_by_name(t) for t in inputs],
                       [graph.get_tensor_by_name(t) for t in outputs], concrete.structured_outputs)  # fmt: skip


def fold_constants(graph, outputs):
    """Grappler's constant folding only (as TF-TRT runs it): e.g. Shape of a static tensor
    becomes a Const, so the Reshape fed by it can be converted."""
    import tensorflow as tf
    from tensorflow.core.protobuf import config_pb2, meta_graph_pb2
    from tensorflow.python.grappler import tf_optimizer

    meta = tf.compat.v1.train.export_meta_graph(graph_def=graph.as_graph_def(), graph=graph)
    fetch = meta_graph_pb2.CollectionDef()
    fetch.node_list.value.extend(outputs)
    meta.collection_def["train_op"].CopyFrom(fetch)  # what grappler must keep
    config = config_pb2.ConfigProto()
    rewrite = config.graph_options.rewrite_options
    rewrite.optimizers.extend(["constfold"])
    rewrite.meta_optimizer_iterations = 1
    return tf_optimizer.OptimizeGraph(config, meta)


def imported(graph_def):
    """A tf.Graph of `graph_def` in which a resource or variant Placeholder with a
    `_handle_data` attr (`with_handle_data`) keeps the dtype and shape of what it holds (a
    variable's value, a TensorList's elements): what reads it has a shape. Import alone
    would lose them."""
    import tensorflow as tf
    from tensorflow.core.framework import cpp_shape_inference_pb2
    from tensorflow.python.ops import handle_data_util

    # `"x" in attr` first: reading a missing key of a proto map would add an empty attr
    handles = [n for n in graph_def.node if n.op == "Placeholder" and "_handle_data" in n.attr]
    graph = tf.Graph()
    rest = graph_def
    if handles:
        names = {n.name for n in handles}
        rest = tf.compat.v1.GraphDef(versions=graph_def.versions, library=graph_def.library)
        rest.node.extend(n for n in graph_def.node if n.name not in names)
    with graph.as_default():
        inputs = {}
        for node in handles:  # made first, with their handle data, so import infers from it
            placeholder = tf.compat.v1.placeholder(tf.dtypes.as_dtype(node.attr["dtype"].type), [], name=node.name)
            placeholder.op._set_attr("_handle_data", node.attr["_handle_data"])  # TF-internal; for the next import
            data = cpp_shape_inference_pb2.CppShapeInferenceResult.HandleData.FromString(node.attr["_handle_data"].s)
            handle_data_util.set_handle_data(placeholder, data)
            inputs[placeholder.name] = placeholder
        used = {i if ":" in i else i + ":0" for n in rest.node for i in n.input if not i.startswith("^")}
        tf.graph_util.import_graph_def(rest, input_map={k: v for k, v in inputs.items() if k in used}, name="")
    return graph


def with_handle_data(node, data) -> None:
    """Record HandleData `data` (the dtype and shape of what a resource or variant holds, and
    for a TensorList its full type) on Placeholder NodeDef `node`, for `imported`."""
    node.attr["_handle_data"].s = data.SerializeToString()
