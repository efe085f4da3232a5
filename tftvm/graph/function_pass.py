"""What `tftvm.enable()`'s pass does to one graph TF is about to run.

TF hands over a function's graph as it will execute it: arguments are `_Arg` nodes, results
`_Retval` nodes, variables are resource arguments read by `ReadVariableOp` (they stay
variables: a training step still updates them). The graph goes through the same pipeline as
`optimize` (mark -> partition -> convert -> compile, `offload`), with the arguments as
placeholders, and comes back with each compiled cluster replaced by its TvmCall nodes.
"""
from __future__ import annotations

import dataclasses
import logging
import time

from .frontend import CONVERTERS
from .frontend.support import NOT_COMPUTE
from .offload import control_flow, report, safety_net
from .offload.pipeline import offload
from .tfgraph.freeze import FrozenGraph, fold_constants, imported, with_handle_data
from .tfgraph.functionalize import as_tf2
from .tfgraph.inline import inline_calls
from .tfgraph.names import tensor_name

log = logging.getLogger(__name__)

# Graphs left alone: tf.data's functions (map, filter, ...) run per element on tf.data's
# threads, input pipelines rather than model compute; TF wraps some single eager ops in a
# function of one node each.
SKIPPED_FUNCTIONS = ("__inference_Dataset_", "__wrapped__")
VARIABLE_UPDATES = ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp", "ResourceApply",
                    "ResourceSparseApply", "ResourceScatter")  # fmt: skip


@dataclasses.dataclass
class Rewrite:
    """What the pass did to one graph: `report` is optimize's report of it."""

    function: str
    seconds: float
    offloaded: int
    compute_nodes: int
    report: str
    error: str | None = None
    compiled: int = 0  # kernels compiled for this graph
    cached: int = 0  # kernels loaded from the disk cache (compiled before, here or by optimize)


def rewrite(graph_def_bytes: bytes, function_def_bytes: bytes, options: dict) -> tuple[bytes, Rewrite | None]:
    """The rewritten GraphDef (empty where nothing is offloaded) and what was done."""
    from tensorflow.core.framework.function_pb2 import FunctionDef

    from ..kernel import counting

    function_def = FunctionDef.FromString(function_def_bytes)
    if function_def.signature.name.startswith(SKIPPED_FUNCTIONS):
        return b"", None
    with counting() as counts:
        rewritten, done = _rewrite(graph_def_bytes, function_def, options)
    if done is not None:
        done.compiled, done.cached = counts["compiled"], counts["cached"]
        log.info("%s: %d of %d compute nodes offloaded in %.2f s (%d kernels compiled, %d from the cache)",
                 done.function, done.offloaded, done.compute_nodes, done.seconds, done.compiled, done.cached)  # fmt: skip
    return rewritten, done


def _rewrite(graph_def_bytes, function_def, options):
    import tensorflow as tf

    name = function_def.signature.name
    start = time.perf_counter()
    # Keras calls its step function from another (train_function -> one_step_on_data): TF
    # inlines such calls only after this pass, so the pass inlines them itself.
    # TF1 loops and TensorArrays (a wrapped TF1 graph) take TF2's forms, as in freeze.
    graph_def = as_tf2(inline_calls(tf.compat.v1.GraphDef.FromString(graph_def_bytes)))
    if not any(n.op in CONVERTERS and n.op not in NOT_COMPUTE or n.op in control_flow.BODY_ATTRS
               for n in graph_def.node):  # fmt: skip
        return b"", None  # nothing TVM could convert: not worth building a Python graph
    log.info("%s: %d nodes, converting what TVM can run (first call of this graph)", name, len(graph_def.node))
    frozen, args, results = _as_frozen(graph_def, function_def)
    # TF finds the function's control outputs by name after the pass: they stay TF nodes.
    kept = {n: "a control output of the function" for n in function_def.control_ret.values()}
    # Loop and branch bodies (an RNN's time step) first, as optimize does: the While stays a
    # TF node calling an optimized body function, which TF then lowers into the graph.
    if _updates_variables(graph_def):  # a training step: TVM stays where it clearly wins
        in_loops = dict(options, tvm_must_win_by=safety_net.TRAINING_LOOP_MARGIN)
        options = dict(options, tvm_must_win_by=safety_net.TRAINING_STEP_MARGIN)
    else:  # an inference graph: its variables hold still between calls
        options = in_loops = dict(options, memoize_weights=True)
    frozen, bodies = control_flow.optimize_bodies(frozen, lambda body: offload(body, **in_loops))
    in_bodies = sum(b.offloaded for b in control_flow.flatten(bodies))
    clusters, reasons, run = offload(frozen, **options, kept=kept)
    if not clusters and not bodies:
        return b"", None
    summary = report.summarize(frozen, clusters, reasons, in_bodies)
    text = report.format_report(frozen, clusters, reasons, in_bodies)
    text += "\n" + report.bodies_text(control_flow.flatten(bodies)) if bodies else ""
    done = Rewrite(name, time.perf_counter() - start, summary.offloaded, summary.compute_nodes, text)
    rewritten = _with_clusters(run, args, results, function_def).SerializeToString() if summary.offloaded else b""
    return rewritten, done


def _updates_variables(graph_def) -> bool:
    """Does the graph assign to variables (a training step: the optimizer's updates)?"""
    return any(n.op.startswith(VARIABLE_UPDATES) for n in graph_def.node)


def _as_frozen(graph_def, function_def):
    """`graph_def` with its `_Arg` nodes as placeholders (shapes from the function's argument
    attrs where TF recorded them; a variable's handle keeps its value's dtype and shape, so
    what reads it has a shape), without its `_Retval` nodes, and constant-folded as freeze
    folds (the Shape of a static tensor feeding a Reshape): (FrozenGraph, the `_Arg` nodes in
    index order, the `_Retval` nodes in index order)."""
    args = sorted((n for n in graph_def.node if n.op == "_Arg"), key=lambda n: n.attr["index"].i)
    results = sorted((n for n in graph_def.node if n.op == "_Retval"), key=lambda n: n.attr["index"].i)
    outputs = [tensor_name(r.input[0]) for r in results]
    graph, inputs = _imported(graph_def, args, function_def)
    folded = fold_constants(graph.as_graph_def(), outputs + list(function_def.control_ret.values()))
    graph, inputs = _imported(folded, args, function_def)
    return FrozenGraph(graph, graph.as_graph_def(), inputs, [graph.get_tensor_by_name(t) for t in outputs],
                       None), args, results  # fmt: skip


def _imported(graph_def, args, function_def):
    """A tf.Graph of `graph_def` with its arguments as placeholders (`_Arg` nodes become
    Placeholder nodes of their traced shape, a resource's keeping its variable's dtype and shape)
    and without its results: (graph, placeholders in argument order)."""
    import tensorflow as tf

    arg_names = {a.name for a in args}
    rest = tf.compat.v1.GraphDef(versions=graph_def.versions, library=graph_def.library)
    for arg in args:
        node = rest.node.add(name=arg.name, op="Placeholder")
        node.attr["dtype"].type = arg.attr["T"].type
        node.attr["shape"].shape.CopyFrom(_arg_shape(arg, function_def))
        if "_handle_dtypes" in arg.attr:  # (reading a missing key would add it)
            with_handle_data(node, _handle_data(arg))
    rest.node.extend(n for n in graph_def.node if n.op != "_Retval" and n.name not in arg_names)
    # Colocation with a node this import does not hold is dropped: an argument (an iterator's
    # IteratorGetNext), or a captured variable under the name it had while traced (tf_keras'
    # embedding_lookup names `.../embedding_lookup/8682`, whose `_Arg` is spelled otherwise).
    # The placer colocates a resource's users with it anyway.
    held = {f"loc:@{node.name}".encode() for node in rest.node if node.name not in arg_names}
    for node in rest.node:
        if "_class" in node.attr:
            kept = [c for c in node.attr["_class"].list.s if not c.startswith(b"loc:@") or c in held]
            del node.attr["_class"].list.s[:]
            node.attr["_class"].list.s.extend(kept)
            if not kept:
                del node.attr["_class"]
    graph = imported(rest)
    return graph, [graph.get_tensor_by_name(f"{a.name}:0") for a in args]


def _placeholders(args, function_def) -> list:
    """A placeholder per `_Arg`, named as it, of its dtype and traced shape (a resource with
    its variable's dtype and shape as handle data)."""
    import tensorflow as tf
    from tensorflow.python.ops import handle_data_util

    out = []
    for arg in args:
        dtype = tf.dtypes.as_dtype(arg.attr["T"].type)
        t = tf.compat.v1.placeholder(dtype, tf.TensorShape(_arg_shape(arg, function_def)), name=arg.name)
        if dtype == tf.resource and "_handle_dtypes" in arg.attr:
            handle_data_util.set_handle_data(t, _handle_data(arg))
        out.append(t)
    return out


def _handle_data(arg):
    """The HandleData of a resource `_Arg` (its variable's dtype and shape, which TF keeps in
    `_handle_dtypes`/`_handle_shapes`)."""
    from tensorflow.core.framework import cpp_shape_inference_pb2

    data = cpp_shape_inference_pb2.CppShapeInferenceResult.HandleData(is_set=True)
    for dtype, shape in zip(arg.attr["_handle_dtypes"].list.type, arg.attr["_handle_shapes"].list.shape):
        data.shape_and_type.add(dtype=dtype, shape=shape)
    return data


def _arg_shape(node, function_def):
    """The argument's shape as TF traced it (`_output_shapes` of the function's arg attrs,
    or of the node), else unknown."""
    import tensorflow as tf

    index = node.attr["index"].i
    for attrs in ([function_def.arg_attr[index].attr] if index in function_def.arg_attr else []) + [node.attr]:
        if "_output_shapes" in attrs and attrs["_output_shapes"].list.shape:
            return attrs["_output_shapes"].list.shape[0]
    return tf.TensorShape(None).as_proto()


def _with_clusters(run, args, results, function_def):
    """The graph `run` builds (TF nodes replayed, clusters as TvmCall nodes, the functions
    they call in its library), with `_Arg` and `_Retval` nodes where TF expects them."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        outputs = run(*_placeholders(args, function_def))
    graph_def = graph.as_graph_def()
    by_name = {a.name: a for a in args}
    for node in graph_def.node:
        if node.op == "Placeholder" and node.name in by_name:
            node.CopyFrom(by_name[node.name])  # the _Arg itself: its index, type and device
    for result, tensor in zip(results, outputs):
        node = graph_def.node.add()
        node.CopyFrom(result)
        node.input[0] = tensor.name[:-2] if tensor.name.endswith(":0") else tensor.name
    _restore_names(graph_def, run.renamed)
    return graph_def


def _restore_names(graph_def, renamed: dict) -> None:
    """Give replayed nodes back the names TF made unique (a node `X` replayed after nodes in
    scope `X/` became `X_1`): TF finds a function's control outputs by name."""
    taken = {n.name for n in graph_def.node}
    renamed = {new: old for new, old in renamed.items() if old not in taken}
    if not renamed:
        return

    def fixed(ref: str) -> str:
        control, name = ref.startswith("^"), ref.lstrip("^")
        node, sep, port = name.partition(":")
        return ("^" if control else "") + renamed.get(node, node) + sep + port

    for node in graph_def.node:
        node.name = renamed.get(node.name, node.name)
        node.input[:] = [fixed(i) for i in node.input]
