"""TF1 control flow made functional (While and If nodes calling functions) and TF1
TensorArrays made TensorLists: a TF1 graph in the forms TF2 emits.

tf.while_loop and tf.cond with control flow v2 off (TF1 code, and many frozen graphs) build
loops out of Enter, Merge, Switch, NextIteration, Exit and LoopCond nodes: a cyclic graph
whose loop no cluster can split and no replay of a part can run. TF's own pass for XLA's
bridge (tf2xla's FunctionalizeControlFlow, through the native library) rewrites each such
loop as a While node and each such cond as an If node, as TF2 emits them, so their bodies
go through tftvm's control-flow pipeline as TF2's do. The TensorArrays those loops carry
become TensorLists then (tensor_arrays.py).
"""
from __future__ import annotations

import logging
import re

from .names import drop_dangling_colocation

log = logging.getLogger(__name__)

# The nodes of TF1's control flow (their Ref- forms read reference variables, frozen away).
V1_OPS = frozenset({"Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond", "RefEnter", "RefExit",
                    "RefMerge", "RefSwitch", "RefNextIteration"})  # fmt: skip


class NotFunctional(ValueError):
    """TF1 control flow that TF's pass could not make functional."""


def has_v1_control_flow(graph_def) -> bool:
    return any(n.op in V1_OPS for n in graph_def.node)


def functional(graph_def):
    """`graph_def` with its TF1 loops and conds as While and If nodes, their bodies added to
    its library; `graph_def` itself where it has none. Raises NotFunctional with TF's
    reason where the pass fails."""
    import tensorflow as tf

    from ...native import functionalize_control_flow

    if not has_v1_control_flow(graph_def):
        return graph_def
    try:
        out = functionalize_control_flow(graph_def.SerializeToString())
    except Exception as err:  # TF's status, raised by the native library
        raise NotFunctional(f"TF1 control flow (Enter/Merge/Switch/Exit) that TF cannot make functional: {err}") from err
    result = tf.compat.v1.GraphDef.FromString(out)
    known = {f.signature.name for f in graph_def.library.function}
    made = {f.signature.name for f in result.library.function} - known
    for fdef in result.library.function:
        if fdef.signature.name in made:
            _free_constants(fdef)
    drop_dangling_colocation(result)
    result = _named_by_contents(result, made)
    log.info("TF1 control flow made functional: %d While/If nodes", sum(n.op in ("While", "If") for n in result.node))
    return result


def _free_constants(fdef) -> None:
    """The Const nodes of a body without their control inputs: TF1 makes each constant of a
    loop or branch wait for the frame's pivot (the only way into its frame), which a function
    needs not; left, they make the constants look computed (a concat's axis, a split's)."""
    for node in fdef.node_def:
        if node.op == "Const" and any(i.startswith("^") for i in node.input):
            del node.input[:]


MAX_SHAPE_ROUNDS = 32


_DIGEST = re.compile(r"_tftvm[0-9a-f]{12}$")


def _named_by_contents(graph_def, names: set):
    """`graph_def` with the functions `names` named by their contents too (a name this gave
    before is replaced): the pass names its bodies `_functionalize_body_0` and so on in every
    graph, and TF's library of a process, where the loops of two graphs meet (the enable()
    pass adds a graph's new functions to it; an import keeps the first function of a name),
    must not take one graph's body for another's, nor a body for its rewritten self."""
    import hashlib

    renamed = {}
    for fdef in graph_def.library.function:
        if fdef.signature.name in names:
            contents = fdef.__deepcopy__()
            contents.signature.name = ""
            digest = hashlib.sha256(contents.SerializeToString(deterministic=True)).hexdigest()[:12]
            renamed[fdef.signature.name] = _DIGEST.sub("", fdef.signature.name) + f"_tftvm{digest}"
    nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    for node in nodes:
        for value in node.attr.values():
            if value.HasField("func") and value.func.name in renamed:
                value.func.name = renamed[value.func.name]
    for fdef in graph_def.library.function:
        fdef.signature.name = renamed.get(fdef.signature.name, fdef.signature.name)
    return graph_def


def as_tf2(graph_def):
    """`graph_def` with TF1 loops and conds functional and TF1 TensorArrays TensorLists;
    `graph_def` itself where it has neither."""
    import tensorflow as tf

    from .tensor_arrays import as_tensor_lists, has_tensor_arrays

    made = functional(graph_def)
    if made is graph_def and not has_tensor_arrays(graph_def):
        return graph_def
    if has_tensor_arrays(made):
        graph = tf.Graph()  # the shapes of what is scattered into arrays, for their element shapes
        with graph.as_default():
            tf.graph_util.import_graph_def(made, name="")
        lists = as_tensor_lists(made, {t.name: t.shape for op in graph.get_operations() for t in op.outputs})
        if lists is not made:  # the loop bodies changed: new names for them
            made = _named_by_contents(lists, {f.signature.name for f in lists.library.function
                                              if _DIGEST.search(f.signature.name)})  # fmt: skip
    return with_loop_shapes(made) if made is not graph_def else graph_def


def with_loop_shapes(graph_def):
    """`graph_def` with each While node of its outer graph that declares no shapes given the
    shapes its loop keeps, as TF2 declares them: each loop variable's shape where the body
    returns a shape compatible with it, else the shape both have in common (a dim the body
    changes becomes unknown), found by running the body's shape inference until nothing
    changes (every shape unknown if that takes more than MAX_SHAPE_ROUNDS: a shape too
    specific would be wrong). The loop bodies are then compiled for those shapes
    (control_flow.py). Loops inside loop bodies keep their unknown shapes."""
    import tensorflow as tf
    from tensorflow.python.framework import function_def_to_graph

    loops = [n for n in graph_def.node if n.op in ("While", "StatelessWhile")
             and all(s.unknown_rank for s in n.attr["output_shapes"].list.shape)]  # fmt: skip
    if not loops:
        return graph_def
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
        library = {f.signature.name: f for f in graph_def.library.function}
        for node in loops:
            shapes = [t.shape for t in graph.get_operation_by_name(node.name).inputs]
            for _ in range(MAX_SHAPE_ROUNDS):  # each round makes a dim or a rank unknown, or stops
                body = function_def_to_graph.function_def_to_graph(library[node.attr["body"].func.name],
                                                                   input_shapes=shapes)  # fmt: skip
                kept = [s.most_specific_compatible_shape(o.shape) for s, o in zip(shapes, body.outputs)]
                if [str(s) for s in kept] == [str(s) for s in shapes]:
                    break
                shapes = kept
            else:
                shapes = [tf.TensorShape(None)] * len(shapes)
            del node.attr["output_shapes"].list.shape[:]
            node.attr["output_shapes"].list.shape.extend(s.as_proto() for s in shapes)
    return graph_def
