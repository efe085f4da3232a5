"""Freeze: trace a function or model for a signature, variables become constants."""
from __future__ import annotations

import dataclasses

from .weights import restored, split, values


@dataclasses.dataclass
class FrozenGraph:
    graph: object  # tf.Graph of the frozen concrete function
    graph_def: object
    inputs: list  # input tensors (placeholders), in signature order
    outputs: list  # output tensors, flattened
    structured_outputs: object  # the function's output structure
    # Inputs (tensor names) that hold a constant weight: a loop body's large loop-invariant
    # constants stay arguments (control_flow.body_graph); the offload treats them as variables.
    weights: frozenset = frozenset()
    # Placeholders (tensor names) that hold a model's weight, and its value (a TF tensor):
    # weights held once beside the graph, not in it (freeze's `weights_apart`).
    weight_values: dict = dataclasses.field(default_factory=dict)

    def tensor(self, name: str):
        return self.graph.get_tensor_by_name(name)


def freeze(fn, input_signature, *, weights_apart: bool = False) -> FrozenGraph:
    """Trace `fn` (tf.function, tf.Module with __call__, Keras model, or plain callable),
    turn variables into constants and fold what is constant (static shapes included).
    `weights_apart`: the weights (weights.py) are Placeholders, their values in
    `weight_values`, so that no holder of the graph holds them (compile_model)."""
    import tensorflow as tf

    from .functionalize import as_tf2
    from .inline import inline_calls

    function = fn if hasattr(fn, "get_concrete_function") else tf.function(fn)
    concrete = function.get_concrete_function(*input_signature)
    traced, inputs, outputs = _without_variables(concrete)
    # nested jit calls inlined too; TF1 loops and TensorArrays in TF2's forms
    graph_def, weights = fold_constants_apart(as_tf2(inline_calls(traced)), outputs)
    weight_values = values(weights) if weights_apart else {}
    graph_def = graph_def if weights_apart else restored(graph_def, weights)
    del weights
    graph = imported(graph_def)
    return FrozenGraph(graph, graph_def, [graph.get_tensor_by_name(t) for t in inputs],
                       [graph.get_tensor_by_name(t) for t in outputs], concrete.structured_outputs,
                       weight_values=weight_values)  # fmt: skip


def _without_variables(concrete):
    """(GraphDef, input names, output names) of ConcreteFunction `concrete` with its variables
    made Consts; While/If stay functional nodes (RNN layers emit them: one node each, acyclic).

    TF's convert_variables_to_constants_v2 does this in two steps and then builds a
    ConcreteFunction of the result (imported, its functions registered), which holds several
    copies of a model's weights at once, for a graph that freeze only reads as a GraphDef:
    the two steps are called here, and the public function where a TF version lacks them."""
    from tensorflow.python.framework import convert_to_constants as convert
    from tensorflow.python.util import object_identity

    data = getattr(convert, "_FunctionConverterDataInEager", None)
    replace = getattr(convert, "_replace_variables_by_constants", None)
    if data is None or replace is None:
        frozen = convert.convert_variables_to_constants_v2(concrete, lower_control_flow=False)
        return frozen.graph.as_graph_def(), [t.name for t in frozen.inputs], [t.name for t in frozen.outputs]
    graph_def, converted = replace(
        converter_data=data(func=concrete, lower_control_flow=False, aggressive_inlining=False))
    captures = concrete.graph.internal_captures
    constants = object_identity.ObjectIdentitySet(captures[i] for i in converted)
    return graph_def, [t.name for t in concrete.inputs if t not in constants], [t.name for t in concrete.outputs]


def fold_constants(graph_def, outputs):
    """Grappler's constant folding only (as TF-TRT runs it): e.g. Shape of a static tensor
    becomes a Const, so the Reshape fed by it can be converted. The weights are Consts
    again after (see fold_constants_apart)."""
    return restored(*fold_constants_apart(graph_def, outputs))


def fold_constants_apart(graph_def, outputs) -> tuple:
    """(folded GraphDef, its weights): fold_constants with the weights (weights.split: Consts
    of `WEIGHT_BYTES` or more) Placeholders of their dtype and shape, their Const NodeDefs
    beside it. Grappler holds several copies of the graph it is given at once, and folding
    writes a new Const for each Identity of a weight (freezing makes one per read of a
    variable): an LLM's weights many times over. What is computed from weights alone is
    folded when a cluster or model is compiled (Relax's FoldConstant), or memoized where
    they are arguments."""
    from tensorflow.core.protobuf import config_pb2, meta_graph_pb2
    from tensorflow.python.grappler import tf_optimizer

    light, weights = split(graph_def)
    meta = meta_graph_pb2.MetaGraphDef(graph_def=light)
    fetch = meta_graph_pb2.CollectionDef()
    fetch.node_list.value.extend(outputs)
    meta.collection_def["train_op"].CopyFrom(fetch)  # what grappler must keep
    config = config_pb2.ConfigProto()
    rewrite = config.graph_options.rewrite_options
    rewrite.optimizers.extend(["constfold"])
    rewrite.meta_optimizer_iterations = 1
    return tf_optimizer.OptimizeGraph(config, meta), weights


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
