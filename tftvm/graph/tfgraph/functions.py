"""The functions a graph calls, and running a GraphDef as a function of TF tensors."""
from __future__ import annotations


def functions_called(node, library: dict) -> list:
    """The FunctionDefs of `library` that `node` calls (func attrs: a While's cond and body,
    an If's branches, ...), and the ones those call, transitively."""
    found, pending = {}, [node]
    while pending:
        n = pending.pop()
        names = [n.op] if n.op in library else []
        for attr in n.attr.values():
            names += [attr.func.name] if attr.HasField("func") else [f.name for f in attr.list.func]
        for name in names:
            if name in library and name not in found:
                found[name] = library[name]
                pending += library[name].node_def
    return list(found.values())


def register_functions(functions) -> None:
    """Make `functions` known to the eager context: a traced function that calls them runs
    there, and a graph's imported library is not registered with it."""
    from tensorflow.python.eager import context

    ctx = context.context()
    for fdef in functions:
        if not ctx.has_function(fdef.signature.name):
            ctx.add_function_def(fdef)


def graph_runner(graph_def, inputs, outputs):
    """A function of TF tensors that runs `graph_def` fed at tensor names `inputs`, giving
    the tensors named `outputs` (a cluster's nodes, or a whole frozen model)."""
    import tensorflow as tf

    def run(*args):
        return tf.graph_util.import_graph_def(graph_def, input_map=dict(zip(inputs, args)),
                                              return_elements=list(outputs), name="")  # fmt: skip

    return run
