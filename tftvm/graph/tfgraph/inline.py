"""Inline function calls: the bodies of (Stateful)PartitionedCall nodes join the graph.

Keras 3 puts some layers (grouped and depthwise convolutions, for example) into nested
`jit_compile` functions; grappler's own inliner leaves those alone (`_XlaMustCompile`), so their
compute would stay hidden in one opaque TF node. `inline_calls` splices each call's body in place:

- body nodes are renamed `<call name>/<body node name>` (a fresh prefix if that is taken), and
  so are the body nodes their colocation constraints (`_class`) name;
- each function argument becomes an `Identity` fed by the call's matching input;
- the call node becomes an `IdentityN` (an `Identity` for one output, a `NoOp` for none) of the
  same name whose inputs are the body's return tensors, so consumers of `call:i` and `^call`
  stay valid; it also waits on the body's control outputs (`control_ret`), so `^call` still
  orders everything the call ordered;
- the call's own control inputs go to the argument Identities and to every body node without
  inputs, so nothing in the body runs before what the call waited for.

Calls inside inlined bodies are inlined too (up to `max_depth` levels). Functional control flow
(While, If, ...) is left as it is, bodies included; the functions those nodes still name stay in
the library, the ones nothing names any more are dropped.
"""
from __future__ import annotations

import logging

from .functions import prune_library

logger = logging.getLogger(__name__)

CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
MAX_DEPTH = 32


def inline_calls(graph_def, max_depth: int = MAX_DEPTH):
    """A copy of `graph_def` (a GraphDef with its function library) with every call of a library
    function inlined, recursively; functions that nothing references any more are dropped."""
    from tensorflow.core.framework import graph_pb2

    library = {f.signature.name: f for f in graph_def.library.function}
    if not library or not any(_callee(n, library) is not None for n in graph_def.node):
        return graph_def
    inliner = _Inliner(library, {n.name for n in graph_def.node}, max_depth)
    nodes = []
    for node in graph_def.node:
        nodes.extend(inliner.expand(node, 0))
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    del out.node[:]
    ready = _always_ready(nodes)
    for node in nodes:
        if node.name in inliner.created:
            _drop_control_inputs(node, ready)
    out.node.extend(nodes)
    prune_library(out)
    logger.info("inlined %d function calls (%d nodes now, %d functions left in the library)",
                inliner.count, len(out.node), len(out.library.function))  # fmt: skip
    return out


def call_nodes(graph_def) -> list:
    """The nodes of `graph_def` that call a function of its library (what `inline_calls` inlines)."""
    library = {f.signature.name: f for f in graph_def.library.function}
    return [n for n in graph_def.node if _callee(n, library) is not None]


def _callee(node, library):
    if node.op in CALL_OPS:
        return library.get(node.attr["f"].func.name)
    return library.get(node.op)


class _Inliner:
    def __init__(self, library, taken, max_depth):
        self.library = library
        self.taken = taken  # every node name in the output so far (and the original ones)
        self.max_depth = max_depth
        self.count = 0
        self.created = set()  # names of the nodes inlining made
        self._bodies = {}  # function name -> (body GraphDef, nested->flat tensor names)
        self._scope = None

    def expand(self, node, depth):
        """The nodes that replace `node`: itself, or its inlined body and the node that stands
        for the call (IdentityN, Identity or NoOp)."""
        fdef = _callee(node, self.library)
        if fdef is None:
            return [node]
        name = fdef.signature.name
        if depth >= self.max_depth:
            logger.warning("not inlining %s (calls %s): nested deeper than %d levels",
                           node.name, name, self.max_depth)  # fmt: skip
            return [node]
        if fdef.signature.attr:  # polymorphic function: its attrs come from the call site
            logger.info("not inlining %s: function %s has attrs %s", node.name, name,
                        [a.name for a in fdef.signature.attr])  # fmt: skip
            return [node]
        data_inputs = [i for i in node.input if not i.startswith("^")]
        control_inputs = [i for i in node.input if i.startswith("^")]
        if len(data_inputs) != len(fdef.signature.input_arg):
            logger.warning("not inlining %s: %d inputs for %d arguments of %s", node.name,
                           len(data_inputs), len(fdef.signature.input_arg), name)  # fmt: skip
            return [node]
        body, flat = self._body(fdef)
        prefix = self._prefix(node.name, body)
        self.count += 1

        def rename(ref):
            ctrl = ref.startswith("^")
            ref = ref[1:] if ctrl else ref
            return ("^" if ctrl else "") + prefix + ref

        args = {a.name: i for i, a in enumerate(fdef.signature.input_arg)}
        body_names = {n.name for n in body.node}
        renamed = []
        for body_node in body.node:
            new = body_node.__deepcopy__()
            new.name = prefix + body_node.name
            self.taken.add(new.name)
            _rename_colocation(new, prefix, body_names)
            if body_node.name in args and body_node.op == "Placeholder":
                arg = fdef.signature.input_arg[args[body_node.name]]
                new.op = "Identity"
                new.ClearField("attr")
                new.attr["T"].type = arg.type
                del new.input[:]
                new.input.append(data_inputs[args[body_node.name]])
                new.input.extend(control_inputs)
            elif new.input:
                new.input[:] = [rename(i) for i in new.input]
            else:  # a body node without inputs: it must still wait for the call's control inputs
                new.input.extend(control_inputs)
            renamed.append(new)
        out = []
        for new in renamed:
            out.extend(self.expand(new, depth + 1))

        result = node.__class__()
        result.name = node.name
        result.device = node.device
        returns = [prefix + self._flat(fdef.ret[a.name], flat) for a in fdef.signature.output_arg]
        if len(returns) == 1:  # the common case: a plain Identity, known to every pass
            result.op = "Identity"
            result.input.extend(returns)
            result.attr["T"].type = fdef.signature.output_arg[0].type
        elif returns:
            result.op = "IdentityN"
            result.input.extend(returns)
            result.attr["T"].list.type.extend([a.type for a in fdef.signature.output_arg])
        else:
            result.op = "NoOp"
        result.input.extend("^" + prefix + n for n in sorted(fdef.control_ret.values()))
        if not returns and not fdef.control_ret:
            result.input.extend(control_inputs)  # keep what `^call` ordered after
        self.created.update(n.name for n in renamed)
        self.created.add(result.name)
        out.append(result)
        return out

    def _body(self, fdef):
        from tensorflow.core.framework import graph_pb2
        from tensorflow.python.framework import function_def_to_graph, importer, ops

        name = fdef.signature.name
        if name not in self._bodies:
            if self._scope is None:  # a graph that knows the library (calls by function name)
                self._scope = ops.Graph()
                library = graph_pb2.GraphDef()
                library.library.function.extend(self.library.values())
                with self._scope.as_default():
                    importer.import_graph_def(library, name="")
            with self._scope.as_default():
                self._bodies[name] = function_def_to_graph.function_def_to_graph_def(fdef)
        return self._bodies[name]

    @staticmethod
    def _flat(ret, flat):
        if ret in flat:
            return flat[ret]
        return ret if ":" in ret else ret + ":0"  # an argument returned as it is

    def _prefix(self, call_name, body):
        prefix, k = call_name + "/", 0
        while any(prefix + n.name in self.taken for n in body.node):
            k += 1
            prefix = f"{call_name}/_inlined_{k}/"
        return prefix


def _rename_colocation(node, prefix, body_names) -> None:
    """Colocation (`_class: loc:@X`) with body node X names it as inlined (`<prefix>X`)."""
    if "_class" not in node.attr:
        return
    locations = [c.decode() for c in node.attr["_class"].list.s]
    kept = [f"loc:@{prefix}{c[5:]}" if c.startswith("loc:@") and c[5:] in body_names else c for c in locations]
    node.attr["_class"].list.s[:] = [c.encode() for c in kept]


def _always_ready(nodes) -> set:
    """Names of the nodes that do nothing and wait for nothing but constants: Consts without
    inputs, and Identity / NoOp nodes whose inputs all are such nodes (a frozen ReadVariableOp,
    the NoOp that automatic control dependencies hang on it). A control edge from one of them
    orders nothing; the ones the inlined bodies bring would cut them into separate clusters."""
    inputs = {n.name: [i.lstrip("^").split(":")[0] for i in n.input] for n in nodes
              if (n.op == "Const" and not n.input) or n.op in ("Identity", "NoOp")}  # fmt: skip
    pending = {name: len(sources) for name, sources in inputs.items()}
    consumers = {}
    for name, sources in inputs.items():
        for source in sources:
            consumers.setdefault(source, []).append(name)
    todo = [name for name, count in pending.items() if count == 0]
    ready = set()
    while todo:  # Kahn's order over the candidates: linear, and nodes on a cycle never qualify
        name = todo.pop()
        ready.add(name)
        for consumer in consumers.get(name, ()):
            pending[consumer] -= 1
            if pending[consumer] == 0:
                todo.append(consumer)
    return ready


def _drop_control_inputs(node, ready):
    kept = [i for i in node.input if not (i.startswith("^") and i[1:] in ready)]
    if len(kept) != len(node.input):
        node.input[:] = kept
