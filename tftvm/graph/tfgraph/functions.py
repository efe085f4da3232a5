"""The functions a graph calls, and running a GraphDef as a function of TF tensors."""
from __future__ import annotations

import itertools

_renamings = itertools.count()


def function_refs(node) -> list[str]:
    """The library functions a node names: its op, and func / list(func) attrs."""
    refs = [node.op]
    for value in node.attr.values():
        if value.HasField("func"):
            refs.append(value.func.name)
        elif value.HasField("list"):
            refs.extend(f.name for f in value.list.func)
    return refs


def prune_library(graph_def) -> None:
    """Drop from `graph_def`'s library the functions that no node (nor any kept function, nor
    a kept function's gradient) references."""
    by_name = {f.signature.name: f for f in graph_def.library.function}
    keep, todo = set(), [r for n in graph_def.node for r in function_refs(n)]
    gradients = {g.function_name: g.gradient_func for g in graph_def.library.gradient}
    while todo:
        name = todo.pop()
        if name in by_name and name not in keep:
            keep.add(name)
            todo.extend(r for n in by_name[name].node_def for r in function_refs(n))
            if name in gradients:
                todo.append(gradients[name])
    functions = [f for f in graph_def.library.function if f.signature.name in keep]
    kept_gradients = [g for g in graph_def.library.gradient if g.function_name in keep]
    del graph_def.library.function[:]
    graph_def.library.function.extend(functions)
    del graph_def.library.gradient[:]
    graph_def.library.gradient.extend(kept_gradients)


def functions_called(node, library: dict) -> list:
    """The FunctionDefs of `library` that `node` calls (func attrs: a While's cond and body,
    an If's branches, ...), and the ones those call, transitively."""
    found, pending = {}, [node]
    while pending:
        n = pending.pop()
        for name in function_refs(n):
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


def with_new_function_names(graph_def):
    """A copy of `graph_def` whose library functions have names of their own (`<name>_tftvm<n>`),
    every reference to them (func attrs and call ops, in its nodes and in the functions'
    own) following. TF's eager context refuses a second, different function of a name it
    knows: a frozen graph's loop body, which constant folding has rewritten since the freeze
    registered it, is imported under a new name instead."""
    copy = type(graph_def)()
    copy.CopyFrom(graph_def)
    tag = next(_renamings)
    names = {f.signature.name: f"{f.signature.name}_tftvm{tag}" for f in copy.library.function}
    if not names:
        return copy

    def follow(node):
        if node.op in names:
            node.op = names[node.op]
        for attr in node.attr.values():
            if attr.HasField("func") and attr.func.name in names:
                attr.func.name = names[attr.func.name]
            for func in attr.list.func:
                if func.name in names:
                    func.name = names[func.name]

    for node in copy.node:
        follow(node)
    for function in copy.library.function:
        function.signature.name = names[function.signature.name]
        for node in function.node_def:
            follow(node)
    for gradient in copy.library.gradient:
        gradient.function_name = names.get(gradient.function_name, gradient.function_name)
        gradient.gradient_func = names.get(gradient.gradient_func, gradient.gradient_func)
    return copy


def graph_runner(graph_def, inputs, outputs):
    """A function of TF tensors that runs `graph_def` fed at tensor names `inputs`, giving
    the tensors named `outputs` (a cluster's nodes, or a whole frozen model)."""
    import tensorflow as tf

    def run(*args):
        return tf.graph_util.import_graph_def(graph_def, input_map=dict(zip(inputs, args)),
                                              return_elements=list(outputs), name="")  # fmt: skip

    return run
