"""Control flow: the bodies of functional While/If nodes are optimized like the main graph.

A frozen graph keeps `While`/`If` (and their Stateless forms) as single nodes whose cond, body
and branches are functions of the graph's library (Keras RNN layers emit a While whose body
is one time step). For each such node, `optimize_bodies` turns the body function into a
FrozenGraph of its own (its arguments become placeholders with the loop-invariant shapes,
unknown dims left unknown; an argument that is a Const outside and the same in every iteration,
such as an RNN's weights, becomes a Const and what depends only on it is folded), optimizes
that graph with the same pipeline as the main graph
(mark -> partition -> convert -> compile; bodies of bodies first), traces the replay in a
`tf.function` with the body's signature and puts the resulting FunctionDef into the library
under a new name, which the node then calls. The loop stays a TF node; its step compute runs
as TvmCall nodes. A body that does not optimize (nothing compiled, a trace error, an output
shape the loop does not accept) keeps its original function.
"""
from __future__ import annotations

import dataclasses
import itertools
import logging

from ..tfgraph.freeze import FrozenGraph, imported, with_handle_data
from ..tfgraph.weights import WEIGHT_BYTES
from ..tfgraph.functions import prune_library
from ..frontend.support import NOT_COMPUTE

log = logging.getLogger(__name__)

# Function-valued attrs whose functions are optimized, per op. A While's cond only decides
# whether to go on (a few scalar ops): it stays as it is.
BODY_ATTRS = {
    "While": ("body",),
    "StatelessWhile": ("body",),
    "If": ("then_branch", "else_branch"),
    "StatelessIf": ("then_branch", "else_branch"),
}

_names = itertools.count()


@dataclasses.dataclass
class Body:
    """One body function and what became of it."""

    node: str  # the While/If node calling it ("outer/inner" for a node inside another body)
    attr: str  # "body", "then_branch" or "else_branch"
    function: str  # the original function's name
    replacement: str | None  # the optimized function's name; None when the original stays
    clusters: list  # ClusterSteps of the body graph (empty if it failed before clustering)
    reasons: dict  # body node name -> why it stays in TF (None: it may go to TVM)
    frozen: FrozenGraph | None  # the body as a graph
    error: str | None = None  # why the original stays, if it failed
    inner: list = dataclasses.field(default_factory=list)  # Bodies of its own While/If nodes
    function_defs: list = dataclasses.field(default_factory=list, repr=False)  # the new function and its callees
    # The traced body, held while the Body lives: TF drops the functions a traced function put
    # into the eager context when it is collected (a size switch's cond branches among them), and
    # a graph calling the new body instantiates again after the kernel cache is cleared
    # (tftvm.enable() and disable() clear it), finding them gone.
    traced: object = dataclasses.field(default=None, repr=False)

    @property
    def offloaded(self) -> int:
        """How many compute nodes of the body run in TVM (as the report counts them)."""
        if self.replacement is None:
            return 0
        return sum(1 for c in self.clusters if c.program is not None for n in c.nodes if n.op not in NOT_COMPUTE)


def optimize_bodies(frozen: FrozenGraph, offload, *, strict: bool = False, prefix: str = ""):
    """`frozen` with the bodies of its While/If nodes optimized, and a `Body` per body function.

    `offload(body_frozen) -> (clusters, reasons, run)` is the main graph's pipeline: it clusters
    and compiles a FrozenGraph and returns `run`, a Python function of its inputs that replays
    it. Bodies of bodies are optimized first (they are in the `Body` list with a node path)."""
    # In the order of their dependencies: a gradient loop reads the lists its forward loop filled.
    nodes = [op.node_def for op in frozen.graph.get_operations() if op.type in BODY_ATTRS]
    if not nodes:
        return frozen, []
    library = {f.signature.name: f for f in frozen.graph_def.library.function}
    bodies: list[Body] = []
    done: dict = {}  # key -> Body
    replaced: dict[tuple[str, str], str] = {}  # (node, attr) -> new function name
    lists: dict = {}  # (loop node, output index) -> HandleData of the TensorList its body returns there
    for node in nodes:
        shapes, constants = _input_shapes(node, frozen), _constant_inputs(node, frozen)
        handles = _handles(node, frozen, lists)
        for attr in BODY_ATTRS[node.op]:
            name = node.attr[attr].func.name
            if name not in library:
                continue
            # Nodes that call one function with the same shapes share its optimized body
            # (unless constants were folded into it, which are the node's own).
            key = (name, node.name) if constants else (name, tuple(str(s) for s in shapes), str(handles))
            if key not in done:
                done[key] = body = _optimize_body(frozen, library, name, (shapes, constants, handles), offload,
                                                  strict, f"{prefix}{node.name}", attr)  # fmt: skip
                bodies.append(body)
            body = done[key]
            if attr == "body" and body.frozen is not None:
                lists.update(((node.name, i), d) for i, d in _list_handles(body.frozen.outputs).items())
            if body.replacement is not None:
                replaced[(node.name, attr)] = body.replacement
    if not replaced:
        return frozen, bodies
    graph_def = _with_functions(frozen.graph_def, [b for b in bodies if b.replacement is not None])
    for node in graph_def.node:
        for attr in BODY_ATTRS.get(node.op, ()):
            if (node.name, attr) in replaced:
                node.attr[attr].func.name = replaced[(node.name, attr)]
    prune_library(graph_def)  # the replaced bodies, each a copy of a frozen loop's weights
    return _reimported(frozen, graph_def), bodies


def _optimize_body(frozen, library, name, arguments, offload, strict, node, attr) -> Body:
    """`arguments`: the shapes, constants and handle data of what the caller passes."""
    import tensorflow as tf

    body = Body(node, attr, name, None, [], {}, None)
    shapes, constants, handles = arguments
    try:
        body.frozen = body_graph(frozen.graph_def, library[name], shapes, constants, loop=attr == "body",
                                 handles=handles)  # fmt: skip
        body.frozen, body.inner = optimize_bodies(body.frozen, offload, strict=strict, prefix=f"{node}/")
        body.clusters, body.reasons, run = offload(body.frozen)
        if not any(c.program is not None for c in body.clusters) and not any(b.replacement for b in body.inner):
            log.info("%s %s: nothing to offload in %s, it stays as it is", node, attr, name)
            return body
        specs = [tf.TensorSpec(t.shape, t.dtype) for t in body.frozen.inputs]
        concrete = tf.function(lambda *args: run(*args), input_signature=specs,
                               autograph=False).get_concrete_function()  # fmt: skip
        _check_outputs(concrete, body.frozen, shapes if attr == "body" else None)
        replacement = f"{name}_tftvm_{next(_names)}"
        body.function_defs, body.traced = _function_defs(concrete, replacement), concrete
        body.replacement = replacement
        log.info("%s %s: %s -> %s, %d compute nodes in TVM", node, attr, name, replacement, body.offloaded)
    except Exception as err:  # the original body stays: the loop runs as before
        if strict:
            raise
        body.error = f"{type(err).__name__}: {err}"
        log.warning("%s %s: the original %s stays: %s", node, attr, name, body.error)
    return body


def flatten(bodies: list) -> list:
    """Every `Body`, bodies of bodies included (after the body they are in)."""
    out = []
    for b in bodies:
        out.append(b)
        out += flatten(b.inner)
    return out


def body_graph(graph_def, fdef, shapes, constants=None, loop=False, handles=None) -> FrozenGraph:
    """A FrozenGraph of function `fdef` of `graph_def`'s library: its arguments become
    placeholders of `shapes` (TensorShapes), its results the outputs; a resource argument
    keeps the HandleData in `handles` ({argument index: HandleData}, a variable's dtype and
    shape), so the body's reads of it have a shape.

    `constants` ({argument index: the caller's Const tensor}) become Const nodes, and what only
    depends on them is folded (e.g. the slices of an RNN's weights), as freeze folds the main
    graph; in a loop (`loop=True`) only the arguments the body passes on unchanged, which stay
    the same in every iteration. The argument keeps its place among the inputs (the function's
    signature stays) but nothing reads it any more. A constant of `WEIGHT_BYTES` or more stays
    an argument, named in the result's `weights`: folded, it would be copied into the body
    graph, its trace, the new function and the library (an LLM's decode loop takes all of its
    weights), and what is computed from weights alone runs once per buffer anyway when the
    offload memoizes it (pipeline.offload's `memoize_weights`)."""
    import tensorflow as tf
    from tensorflow.python.framework import function_def_to_graph

    graph = tf.Graph()
    with graph.as_default():
        functions = tf.compat.v1.GraphDef()
        functions.library.CopyFrom(graph_def.library)  # the functions its nodes call
        tf.graph_util.import_graph_def(functions, name="")
        body, flat = function_def_to_graph.function_def_to_graph_def(fdef)
    for i, (node, shape) in enumerate(zip(body.node, shapes)):  # the placeholders come first, in argument order
        node.attr["shape"].shape.CopyFrom(shape.as_proto())
        if i in (handles or {}):  # a variable the body reads: its dtype and shape
            with_handle_data(node, handles[i])
    body.library.CopyFrom(graph_def.library)
    body.versions.CopyFrom(graph_def.versions)
    input_names = [f"{a.name}:0" for a in fdef.signature.input_arg]
    output_names = [flat[fdef.ret[a.name]] for a in fdef.signature.output_arg]
    constants = dict(constants or {})
    if loop:
        constants = {i: t for i, t in constants.items() if _passes_on(body, output_names, i)}
    weights = {i for i, t in constants.items() if t.shape.num_elements() * t.dtype.size >= WEIGHT_BYTES}
    constants = {i: t.op.get_attr("value") for i, t in constants.items() if i not in weights}
    folded = _with_constants(body, constants, output_names + input_names) if constants else None
    for candidate in ([folded] if folded is not None else []) + [body]:
        try:
            graph = imported(candidate)
            return FrozenGraph(graph, candidate, [graph.get_tensor_by_name(t) for t in input_names],
                               [graph.get_tensor_by_name(t) for t in output_names], None,
                               weights=frozenset(input_names[i] for i in weights))  # fmt: skip
        except (KeyError, ValueError) as err:  # folding lost a node: the body as it is
            if candidate is body:
                raise
            log.info("constant folding of %s failed (%s), optimizing it unfolded", fdef.signature.name, err)
    raise AssertionError("unreachable")


def _passes_on(body, output_names, index) -> bool:
    """Does the body return argument `index` unchanged as its output `index`?"""
    by_name = {n.name: n for n in body.node}
    if index >= len(output_names):
        return False
    node = by_name.get(output_names[index].split(":")[0])
    while node is not None and node.op == "Identity":
        node = by_name.get(node.input[0].split(":")[0])
    return node is not None and node.name == body.node[index].name


def _with_constants(body, constants, keep):
    """`body` with the placeholders of `constants` ({index: TensorProto}) made Const nodes, and
    constants folded (the tensors in `keep` stay)."""
    import tensorflow as tf

    from ..tfgraph.freeze import fold_constants

    out = tf.compat.v1.GraphDef()
    out.CopyFrom(body)
    for i, value in constants.items():
        node = out.node[i]
        dtype = node.attr["dtype"].type
        node.op = "Const"
        node.attr.clear()
        node.attr["dtype"].type = dtype
        node.attr["value"].tensor.CopyFrom(value)
    folded = fold_constants(out, keep)
    folded.library.CopyFrom(body.library)
    return folded


def _input_shapes(node, frozen) -> list:
    """The shapes a body's arguments take: a While's loop-invariant `output_shapes`, else the
    shapes of the node's inputs (an If's first input is its condition)."""
    import tensorflow as tf

    op = frozen.graph.get_operation_by_name(node.name)
    inputs = list(op.inputs)[1:] if node.op in ("If", "StatelessIf") else list(op.inputs)
    declared = list(node.attr["output_shapes"].list.shape) if node.op.endswith("While") else []
    if len(declared) == len(inputs):
        return [tf.TensorShape(s) for s in declared]
    return [t.shape for t in inputs]


def _constant_inputs(node, frozen) -> dict:
    """{argument index: tensor} for the arguments of `node`'s bodies that are Consts, or
    weights held apart from the graph (`frozen.weight_values`) (their values are read only
    where they are folded: a weight's is large)."""
    op = frozen.graph.get_operation_by_name(node.name)
    inputs = list(op.inputs)[1:] if node.op in ("If", "StatelessIf") else list(op.inputs)
    return {i: t for i, t in enumerate(inputs)
            if (t.op.type == "Const" or t.name in frozen.weight_values) and t.shape.is_fully_defined()}  # fmt: skip


def _handles(node, frozen, lists) -> dict:
    """{argument index: HandleData} for the arguments of `node`'s bodies that are variables or
    TensorLists whose dtype and shape of what they hold is known: to the graph, or, for a list
    a loop returns (the values a forward loop keeps for its gradient loop), in `lists`."""
    op = frozen.graph.get_operation_by_name(node.name)
    inputs = list(op.inputs)[1:] if node.op in ("If", "StatelessIf") else list(op.inputs)
    found = _list_handles(inputs)
    for i, t in enumerate(inputs):
        while t.op.type == "Identity":
            t = t.op.inputs[0]
        if i not in found and (t.op.name, t.value_index) in lists:
            found[i] = lists[(t.op.name, t.value_index)]
    return found


def _list_handles(tensors) -> dict:
    """{index: HandleData} of the variables and TensorLists among `tensors` whose contents'
    dtype and shape the graph knows."""
    from tensorflow.python.ops import handle_data_util

    found = {}
    for i, t in enumerate(tensors):
        if t.dtype.name in ("resource", "variant"):
            data = handle_data_util.get_resource_handle_data(t)
            if data is not None and data.is_set and data.shape_and_type:
                found[i] = data
    return found


def _check_outputs(concrete, body, invariants=None):
    """The optimized body must return what the original returns, with shapes as general as
    the original's (and, for a loop, as its loop-invariant shapes)."""
    if len(concrete.outputs) != len(body.outputs):
        raise ValueError(f"{len(concrete.outputs)} outputs, the body has {len(body.outputs)}")
    for i, (new, old) in enumerate(zip(concrete.outputs, body.outputs)):
        if new.dtype != old.dtype or not new.shape.is_compatible_with(old.shape):
            raise ValueError(f"output {i} is {new.dtype.name}{new.shape}, the body's is {old.dtype.name}{old.shape}")
        if invariants is not None and not new.shape.is_compatible_with(invariants[i]):
            raise ValueError(f"output {i} is {new.shape}, the loop keeps {invariants[i]}")


def _function_defs(concrete, name) -> list:
    """The FunctionDef of `concrete` renamed `name`, and the functions it calls."""
    from tensorflow.core.framework import function_pb2

    fdef = function_pb2.FunctionDef()
    fdef.CopyFrom(concrete.function_def)
    fdef.signature.name = name
    return [fdef, *concrete.graph.as_graph_def().library.function]


def _with_functions(graph_def, bodies):
    import tensorflow as tf

    out = tf.compat.v1.GraphDef()
    out.CopyFrom(graph_def)
    have = {f.signature.name for f in out.library.function}
    for body in bodies:
        for fdef in body.function_defs:
            if fdef.signature.name not in have:
                have.add(fdef.signature.name)
                out.library.function.append(fdef)
    return out


def _reimported(frozen, graph_def) -> FrozenGraph:
    graph = imported(graph_def)
    tensors = [[graph.get_tensor_by_name(t.name) for t in ts] for ts in (frozen.inputs, frozen.outputs)]
    return FrozenGraph(graph, graph_def, *tensors, frozen.structured_outputs, frozen.weights, frozen.weight_values)
