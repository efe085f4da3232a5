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
    """Trace `fn` (tf.function, tf.Module with __call__, Keras model, or plain callable)."""
    import tensorflow as tf
    from tensorflow.python.framework import convert_to_constants

    function = fn if hasattr(fn, "get_concrete_function") else tf.function(fn)
    concrete = function.get_concrete_function(*input_signature)
    frozen = convert_to_constants.convert_variables_to_constants_v2(concrete)
    graph = frozen.graph
    return FrozenGraph(graph, graph.as_graph_def(), list(frozen.inputs), list(frozen.outputs),
                       concrete.structured_outputs)  # fmt: skip
