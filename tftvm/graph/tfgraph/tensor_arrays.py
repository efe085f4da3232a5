"""TF1 TensorArrays as TensorLists, the values TF2's tf.TensorArray is made of.

A TF1 TensorArray (TensorArrayV3 and its Write/Read/Scatter/Gather/Split/Concat/Size/Close
ops) is a resource: a handle names the array and a float "flow" tensor, threaded from each op
that changes it to the next that reads it, orders them. Functionalized TF1 loops
(functionalize.py) carry both through While nodes. A TensorList is a value instead: the flow
becomes the list itself, each change makes a new one, and the handle is not needed. That is
the form TF2 emits for tf.TensorArray, so TF1 graphs then go through the same control-flow
pipeline: what the loop body computes is offloaded, the list ops stay TF's.

The rule: every op of an array reads its current value from the flow it is given (TF1's
Python API hands each op the flow of the last change), so the flow is the list. A handle may
only reach TensorArray ops, Identity nodes, While loops (whose bodies pass it through) and
If nodes (whose branches return flows, not handles);
anything else reading a handle or a flow, or a gradient array, leaves the graph as it is
(`as_tensor_lists` logs why), in TF, as before. Arrays made in the outer graph are followed
into the loops and conds that take them, and loops and conds whose functions make arrays
are followed into too.

Element shapes: TensorArrayV3's `element_shape` attr, the shape of what is scattered into the
array in the outer graph and the `element_shape` attr TF1 records on gathers and concats
(merged); reads in loop bodies then have shapes, which the body's converters need.
"""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)

ARRAY_OPS = frozenset({"TensorArrayV3", "TensorArrayWriteV3", "TensorArrayReadV3", "TensorArrayScatterV3",
                       "TensorArrayGatherV3", "TensorArraySizeV3", "TensorArrayConcatV3", "TensorArraySplitV3",
                       "TensorArrayCloseV3"})  # fmt: skip

# A TensorArray op: its TensorList op and the inputs it keeps, by position (the handle, input
# 0, goes; the flow, always last, becomes the list). Outputs keep their positions.
_AS_LIST = {
    "TensorArrayWriteV3": ("TensorListSetItem", (1, 2)),  # (handle, index, value, flow)
    "TensorArrayReadV3": ("TensorListGetItem", (1,)),  # (handle, index, flow)
    "TensorArrayScatterV3": ("TensorListScatterIntoExistingList", (2, 1)),  # (handle, indices, value, flow)
    "TensorArrayGatherV3": ("TensorListGather", (1,)),  # (handle, indices, flow)
    "TensorArraySizeV3": ("TensorListLength", ()),  # (handle, flow)
    "TensorArrayConcatV3": ("TensorListConcatV2", ()),  # (handle, flow)
    "TensorArraySplitV3": ("TensorListSplit", (1, 2)),  # (handle, value, lengths, flow)
}
_CHANGES = {"TensorArrayWriteV3", "TensorArrayScatterV3", "TensorArraySplitV3"}  # output 0: the new flow
_PASS_THROUGH = {"Identity", "StopGradient"}
_CONDS = ("If", "StatelessIf")
_FUNCTION_ATTRS = {"While": ("cond", "body"), "If": ("then_branch", "else_branch"),
                   "StatelessIf": ("then_branch", "else_branch")}  # fmt: skip


class NotRewritten(ValueError):
    """A use of a TensorArray this rewrite does not know; the graph keeps its arrays."""


def has_tensor_arrays(graph_def) -> bool:
    """Whether `graph_def` or a function of its library makes a TF1 TensorArray."""
    return any(n.op == "TensorArrayV3" for n in graph_def.node) or any(
        n.op == "TensorArrayV3" for f in graph_def.library.function for n in f.node_def)


def as_tensor_lists(graph_def, shapes=None):
    """A copy of `graph_def` with its TensorArrays (made in the outer graph or in loop bodies,
    and carried into While loops) as TensorLists; `graph_def` itself where it has none, or where one is
    used in a way this rewrite does not know (logged). `shapes`: {tensor name: TensorShape}
    of the outer graph's tensors, where known (what is scattered into an array)."""
    from tensorflow.core.framework import graph_pb2

    if not has_tensor_arrays(graph_def):
        return graph_def
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    library = {f.signature.name: f for f in out.library.function}
    try:
        _Rewrite(library, shapes or {}).run(_Nodes(out.node, None))
    except NotRewritten as why:
        log.info("TensorArrays stay TF1 resources (in TF): %s", why)
        return graph_def
    log.info("TensorArrays rewritten as TensorLists")
    return out


class _Nodes:
    """The nodes of a GraphDef or of a FunctionDef's body, with their inputs read as
    (node or argument name, flat output index) and written back in the body's own spelling
    ("node:i" in a graph, "node:output_arg:i" in a function)."""

    def __init__(self, nodes, fdef):
        self.nodes = nodes  # the repeated NodeDef field, edited in place
        self.fdef = fdef
        self.args = {a.name for a in fdef.signature.input_arg} if fdef is not None else set()
        self.by_name = {n.name: n for n in nodes}

    def read(self, ref: str) -> tuple[str, int]:
        parts = ref.split(":")
        if self.fdef is None:
            return parts[0], int(parts[1]) if len(parts) > 1 else 0
        if len(parts) == 1:
            return parts[0], 0  # an argument
        node = self.by_name[parts[0]]
        return parts[0], _flat_index(node, parts[1], int(parts[2]))

    def write(self, name: str, index: int) -> str:
        if self.fdef is None:
            return name if index == 0 else f"{name}:{index}"
        if name in self.args:
            return name
        arg, k = _output_arg(self.by_name[name], index)
        return f"{name}:{arg}:{k}"


def _output_args(node):
    """[(output arg name, how many tensors)] of `node`, by its op's definition."""
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(node.op)
    if op_def is None:
        raise NotRewritten(f"op {node.op} is not registered")
    sizes = []
    for arg in op_def.output_arg:
        if arg.number_attr:
            sizes.append((arg.name, node.attr[arg.number_attr].i))
        elif arg.type_list_attr:
            sizes.append((arg.name, len(node.attr[arg.type_list_attr].list.type)))
        else:
            sizes.append((arg.name, 1))
    return sizes


def _flat_index(node, arg_name: str, k: int) -> int:
    start = 0
    for name, size in _output_args(node):
        if name == arg_name:
            return start + k
        start += size
    raise NotRewritten(f"{node.name} ({node.op}) has no output {arg_name}")


def _output_arg(node, index: int) -> tuple[str, int]:
    start = 0
    for name, size in _output_args(node):
        if index < start + size:
            return name, index - start
        start += size
    raise NotRewritten(f"{node.name} ({node.op}) has no output {index}")


class _Array:
    """One TensorArray: its element dtype, what is known of its elements' shape, and whether
    it grows as it is written."""

    def __init__(self, node):
        import tensorflow as tf

        self.dtype = node.attr["dtype"].type
        self.shape = tf.TensorShape(node.attr["element_shape"].shape)
        self.grows = node.attr["dynamic_size"].b

    def learn(self, shape) -> None:
        try:
            self.shape = self.shape.merge_with(shape)
        except ValueError as err:
            raise NotRewritten(f"a TensorArray's elements have shapes {self.shape} and {shape}") from err

    def shape_value(self):
        """The element shape as TensorList ops take it: -1 for an unknown rank or dim."""
        import numpy as np

        if self.shape.rank is None:
            return np.array(-1, np.int32)
        return np.array([-1 if d is None else d for d in self.shape.as_list()], np.int32)


class _Body:
    """What the first pass found in one graph or function body: which tensors are handles and
    flows (and of which array), the loops that carry them (node name -> handle positions),
    and each node's data inputs as (name, index) read before any op changed."""

    def __init__(self, nodes: _Nodes, handles: dict, flows: dict):
        self.nodes, self.handles, self.flows = nodes, handles, flows
        self.loops: dict = {}  # While node -> the input positions that carry handles
        self.conds: dict = {}  # If node -> (input positions that carry handles, outputs that are flows)
        self.order: list = []
        self.inputs: dict = {}
        fdef = nodes.fdef  # a function's results, read as its nodes' inputs are
        self.returns = {name: nodes.read(ref) for name, ref in fdef.ret.items()} if fdef is not None else {}


class _Rewrite:
    """Two passes: `find` follows every array through the graph and its loop bodies (so an
    element shape learnt anywhere is known everywhere), `apply` then rewrites each body."""

    def __init__(self, library: dict, shapes: dict):
        self.library = library
        self.shapes = shapes
        self.bodies: list = []
        self.seen_functions: set = set()

    def run(self, nodes: _Nodes) -> None:
        self.find(nodes, {}, {})
        for body in self.bodies:
            self.apply(body)

    # -- the first pass: follow the arrays --------------------------------------------------------

    def find(self, nodes: _Nodes, handles: dict, flows: dict) -> _Body:
        body = _Body(nodes, handles, flows)
        self.bodies.append(body)
        body.order = _topological(nodes)
        for node in body.order:
            inputs = body.inputs[node.name] = [nodes.read(i) for i in node.input if not i.startswith("^")]
            if node.op == "TensorArrayV3":
                handles[(node.name, 0)] = flows[(node.name, 1)] = _Array(node)
            elif node.op in _PASS_THROUGH and inputs and inputs[0] in handles:
                handles[(node.name, 0)] = handles[inputs[0]]
            elif node.op in _PASS_THROUGH and inputs and inputs[0] in flows:
                flows[(node.name, 0)] = flows[inputs[0]]
            elif node.op == "TensorArrayCloseV3":
                pass
            elif node.op in ARRAY_OPS:
                self._follow_array_op(nodes, node, inputs, handles, flows)
            elif node.op == "While" and (any(i in handles or i in flows for i in inputs) or self._makes_arrays(node)):
                body.loops[node.name] = self._follow_loop(node, inputs, handles, flows)
            elif node.op in _CONDS and (any(i in handles or i in flows for i in inputs[1:]) or self._makes_arrays(node)):
                body.conds[node.name] = self._follow_branches(node, inputs, handles, flows)
            elif any(i in handles or i in flows for i in inputs):
                raise NotRewritten(f"{node.name} ({node.op}) reads a TensorArray's handle or flow")
        return body

    def _follow_array_op(self, nodes, node, inputs, handles, flows) -> None:
        import tensorflow as tf

        from .names import tensor_name

        if inputs[0] not in handles or inputs[-1] not in flows or handles[inputs[0]] is not flows[inputs[-1]]:
            raise NotRewritten(f"{node.name} ({node.op}) reads an array this rewrite did not follow")
        array = flows[inputs[-1]]
        outer = nodes.fdef is None  # the outer graph's tensors have shapes
        value = tensor_name(node.input[2]) if node.op in ("TensorArrayScatterV3", "TensorArrayWriteV3") else None
        if outer and value in self.shapes:
            shape = tf.TensorShape(self.shapes[value])
            array.learn(shape if node.op == "TensorArrayWriteV3" or shape.rank is None else shape[1:])
        if node.op == "TensorArrayGatherV3":
            array.learn(tf.TensorShape(node.attr["element_shape"].shape))
        if node.op in _CHANGES:
            flows[(node.name, 0)] = array

    def _follow_loop(self, node, inputs, handles, flows) -> list:
        """The positions of `node` (a While) that carry handles; its bodies followed with
        their arguments known, and its outputs at flow positions flows."""
        carried = {k: handles[i] for k, i in enumerate(inputs) if i in handles}
        threaded = {k: flows[i] for k, i in enumerate(inputs) if i in flows}
        for attr in ("cond", "body"):
            fdef = self._function(node.attr[attr].func.name)
            arg_names = [a.name for a in fdef.signature.input_arg]
            nodes = _Nodes(fdef.node_def, fdef)
            inner = self.find(nodes, {(arg_names[k], 0): a for k, a in carried.items()},
                              {(arg_names[k], 0): a for k, a in threaded.items()})  # fmt: skip
            if attr == "body":
                self._check_returns(fdef, nodes, inner, carried, threaded)
        for k, array in threaded.items():
            flows[(node.name, k)] = array
        for k, array in carried.items():
            handles[(node.name, k)] = array
        return sorted(carried)

    def _follow_branches(self, node, inputs, handles, flows) -> tuple:
        """(input positions that carry handles, output positions that are flows) of `node`
        (an If: input 0 its condition, the rest its branches' arguments); both branches
        followed with their arguments known. Each output must be a flow of one array in
        both branches, or of none; a handle never comes out."""
        carried = {k: handles[i] for k, i in enumerate(inputs) if k and i in handles}
        threaded = {k: flows[i] for k, i in enumerate(inputs) if k and i in flows}
        results = []
        for attr in ("then_branch", "else_branch"):
            fdef = self._function(node.attr[attr].func.name)
            arg_names = [a.name for a in fdef.signature.input_arg]
            nodes = _Nodes(fdef.node_def, fdef)
            inner = self.find(nodes, {(arg_names[k - 1], 0): a for k, a in carried.items()},
                              {(arg_names[k - 1], 0): a for k, a in threaded.items()})  # fmt: skip
            outputs = [inner.returns[a.name] for a in fdef.signature.output_arg]
            if any(o in inner.handles for o in outputs):
                raise NotRewritten(f"branch {fdef.signature.name} returns a TensorArray's handle")
            results.append([inner.flows.get(o) for o in outputs])
        flow_outputs = set()
        for k, (then, other) in enumerate(zip(*results)):
            if then is not other:
                raise NotRewritten(f"the branches of {node.name} return different arrays at output {k}")
            if then is not None:
                flows[(node.name, k)] = then
                flow_outputs.add(k)
        return sorted(carried), flow_outputs

    def _makes_arrays(self, node, depth: int = 0) -> bool:
        """Whether the functions of `node` (a loop's or a cond's, or of loops and conds in
        them) make a TensorArray."""
        for attr in _FUNCTION_ATTRS[node.op]:
            fdef = self.library.get(node.attr[attr].func.name)
            if fdef is None or depth > 32:
                continue
            for inner in fdef.node_def:
                if inner.op == "TensorArrayV3" or inner.op in _FUNCTION_ATTRS and self._makes_arrays(inner, depth + 1):
                    return True
        return False

    def _function(self, name: str):
        if name not in self.library:
            raise NotRewritten(f"function {name} is not in the library")
        if name in self.seen_functions:
            raise NotRewritten(f"function {name} is the body of more than one loop")
        self.seen_functions.add(name)
        return self.library[name]

    @staticmethod
    def _check_returns(fdef, nodes, inner, carried, threaded) -> None:
        """A loop body hands each handle back as it got it, and a flow of the same array."""
        outputs = [inner.returns[a.name] for a in fdef.signature.output_arg]
        for k, array in carried.items():
            if inner.handles.get(outputs[k]) is not array:
                raise NotRewritten(f"loop body {fdef.signature.name} returns another value for handle {k}")
        for k, array in threaded.items():
            if inner.flows.get(outputs[k]) is not array:
                raise NotRewritten(f"loop body {fdef.signature.name} returns another value for flow {k}")

    # -- the second pass: rewrite --------------------------------------------------------------

    def apply(self, body: _Body) -> None:
        """Each array op its TensorList op, each flow a variant, each handle gone: the nodes
        that only pass a handle on, the loops' handle positions, the functions' handle
        arguments and results."""
        from tensorflow.core.framework import types_pb2

        nodes = body.nodes
        dropped = {n.name for n in body.order if (n.name, 0) in body.handles and n.op in _PASS_THROUGH}
        renames = {}  # (name, index) of a loop's output -> its index once the handles are gone
        for node in body.order:
            inputs = body.inputs[node.name]
            if node.name in dropped:
                continue
            if node.op == "TensorArrayV3":
                renames[(node.name, 1)] = (node.name, 0)  # the flow: the list
                self._as_list_op(nodes, node, inputs, body, renames, dropped)
            elif node.op in ARRAY_OPS:
                self._as_list_op(nodes, node, inputs, body, renames, dropped)
            elif node.op in _PASS_THROUGH and inputs and inputs[0] in body.flows:
                node.attr["T"].type = types_pb2.DT_VARIANT
                _write_inputs(nodes, node, inputs, renames, dropped)
            elif node.name in body.loops:
                self._as_list_loop(nodes, node, inputs, body, renames, dropped)
            elif node.name in body.conds:
                self._as_list_cond(nodes, node, inputs, body, renames, dropped)
            else:
                _write_inputs(nodes, node, inputs, renames, dropped)
        kept = [n.__deepcopy__() for n in nodes.nodes if n.name not in dropped]
        for node in kept:  # TF1 colocates an array's ops with what they write: nothing to keep on a CPU,
            if "_class" in node.attr:  # and a constraint naming a node that clusters replace fails the import
                del node.attr["_class"]
        del nodes.nodes[:]
        nodes.nodes.extend(kept)
        nodes.by_name = {n.name: n for n in kept}
        if nodes.fdef is not None:
            _rewrite_returns(nodes, body, renames)

    def _as_list_op(self, nodes, node, inputs, body, renames, dropped) -> None:
        from tensorflow.core.framework import types_pb2

        if node.op == "TensorArrayCloseV3":
            node.op = "NoOp"
            node.ClearField("attr")
            del node.input[:]
            return
        if node.op == "TensorArrayV3":
            array = body.handles[(node.name, 0)]
            size = _rename(nodes, inputs[0], renames)
            node.op = "TensorListReserve"
            node.ClearField("attr")
            node.attr["element_dtype"].type = array.dtype
            node.attr["shape_type"].type = types_pb2.DT_INT32
            del node.input[:]
            node.input.extend([_constant(nodes, node.name + "/element_shape", array.shape_value()), size])
            return
        array = body.flows[inputs[-1]]
        op, keep = _AS_LIST[node.op]
        data = [_rename(nodes, inputs[k], renames) for k in keep]
        controls = [i for i in node.input if i.startswith("^") and i[1:] not in dropped]
        flow = _rename(nodes, inputs[-1], renames)

        def shape(value=None):
            value = array.shape_value() if value is None else value
            return _constant(nodes, node.name + "/element_shape", value)

        node.ClearField("attr")
        node.op = op
        node.attr["element_dtype"].type = array.dtype
        if op == "TensorListSetItem":
            node.attr["resize_if_index_out_of_bounds"].b = array.grows
        if op in ("TensorListConcatV2", "TensorListSplit"):
            node.attr["shape_type"].type = types_pb2.DT_INT32
        if op == "TensorListGetItem":
            node.attr["Tshape"].type = types_pb2.DT_INT32
        new_inputs = {
            "TensorListSetItem": lambda: [flow, *data],
            "TensorListGetItem": lambda: [flow, *data, shape()],
            "TensorListScatterIntoExistingList": lambda: [flow, *data],
            "TensorListGather": lambda: [flow, *data, shape()],
            "TensorListLength": lambda: [flow],
            "TensorListConcatV2": lambda: [flow, shape(_unknown_first(array)),
                                           _constant(nodes, node.name + "/leading_dims", _no_dims())],
            "TensorListSplit": lambda: [data[0], shape(), data[1]],
        }[op]()  # fmt: skip
        del node.input[:]
        node.input.extend(new_inputs + controls)

    def _as_list_loop(self, nodes, node, inputs, body, renames, dropped) -> None:
        from tensorflow.core.framework import types_pb2

        carried = set(body.loops[node.name])
        threaded = {k for k, i in enumerate(inputs) if i in body.flows}
        if not carried and not threaded:  # its bodies make arrays of their own: its signature stays
            _write_inputs(nodes, node, inputs, renames, dropped)
            return
        types = list(node.attr["T"].list.type)
        keep = [k for k in range(len(types)) if k not in carried]
        for k in keep:  # the loop's outputs, renumbered past the handles
            renames[(node.name, k)] = (node.name, keep.index(k))
        del node.attr["T"].list.type[:]
        node.attr["T"].list.type.extend(types_pb2.DT_VARIANT if k in threaded else types[k] for k in keep)
        for attr in ("output_shapes", "_output_shapes"):
            if attr in node.attr and len(node.attr[attr].list.shape) == len(types):
                shapes = list(node.attr[attr].list.shape)
                del node.attr[attr].list.shape[:]
                for k in keep:
                    node.attr[attr].list.shape.add().CopyFrom(shapes[k] if k not in threaded else _scalar_shape())
        if "_read_only_resource_inputs" in node.attr:
            del node.attr["_read_only_resource_inputs"]
        for attr in ("cond", "body"):
            body_outputs = (carried, threaded) if attr == "body" else (set(), set())
            _rewrite_signature(self.library[node.attr[attr].func.name], carried, threaded, *body_outputs)
        controls = [i for i in node.input if i.startswith("^") and i[1:] not in dropped]
        del node.input[:]
        node.input.extend([_rename(nodes, inputs[k], renames) for k in keep] + controls)

    def _as_list_cond(self, nodes, node, inputs, body, renames, dropped) -> None:
        """An If's handle inputs gone, its flow inputs and outputs variants; its branches'
        signatures to match (argument k is input k + 1)."""
        from tensorflow.core.framework import types_pb2

        carried, flow_outputs = body.conds[node.name]
        threaded = {k for k, i in enumerate(inputs) if k and i in body.flows}
        if carried or threaded or flow_outputs:
            tin = list(node.attr["Tin"].list.type)
            del node.attr["Tin"].list.type[:]
            node.attr["Tin"].list.type.extend(types_pb2.DT_VARIANT if k + 1 in threaded else t
                                              for k, t in enumerate(tin) if k + 1 not in carried)  # fmt: skip
            tout = list(node.attr["Tout"].list.type)
            del node.attr["Tout"].list.type[:]
            node.attr["Tout"].list.type.extend(types_pb2.DT_VARIANT if k in flow_outputs else t for k, t in enumerate(tout))
            for attr in ("output_shapes", "_output_shapes"):
                if attr in node.attr and len(node.attr[attr].list.shape) == len(tout):
                    for k in flow_outputs:
                        node.attr[attr].list.shape[k].CopyFrom(_scalar_shape())
            if "_read_only_resource_inputs" in node.attr:
                del node.attr["_read_only_resource_inputs"]
            args = ({k - 1 for k in carried}, {k - 1 for k in threaded})
            for attr in ("then_branch", "else_branch"):
                _rewrite_signature(self.library[node.attr[attr].func.name], *args, set(), flow_outputs)
        controls = [i for i in node.input if i.startswith("^") and i[1:] not in dropped]
        del node.input[:]
        node.input.extend([_rename(nodes, i, renames) for k, i in enumerate(inputs) if k not in carried] + controls)


def _rename(nodes, ref, renames) -> str:
    return nodes.write(*renames.get(ref, ref))


def _write_inputs(nodes, node, inputs, renames, dropped) -> None:
    controls = [i for i in node.input if i.startswith("^") and i[1:] not in dropped]
    del node.input[:]
    node.input.extend([_rename(nodes, i, renames) for i in inputs] + controls)


def _rewrite_returns(nodes, body, renames) -> None:
    for name in list(nodes.fdef.ret):  # a loop's handle results are gone already (_rewrite_signature)
        nodes.fdef.ret[name] = _rename(nodes, body.returns[name], renames)


def _rewrite_signature(fdef, carried: set, threaded: set, dropped_results: set, variant_results: set) -> None:
    """`fdef`'s arguments without the handle positions `carried` and with variants at the flow
    positions `threaded`; its results without `dropped_results`, variants at `variant_results`
    (a loop body's results are its arguments' positions; a branch's its cond's outputs)."""
    from tensorflow.core.framework import types_pb2

    def kept(args, dropped, variants):
        out = []
        for k, arg in enumerate(args):
            if k in dropped:
                continue
            copy = arg.__deepcopy__()
            if k in variants:
                copy.type = types_pb2.DT_VARIANT
            out.append(copy)
        return out

    inputs = kept(fdef.signature.input_arg, carried, threaded)
    arg_attr = {k: fdef.arg_attr[k] for k in fdef.arg_attr}
    keep = [k for k in range(len(fdef.signature.input_arg)) if k not in carried]
    del fdef.signature.input_arg[:]
    fdef.signature.input_arg.extend(inputs)
    fdef.ClearField("arg_attr")
    fdef.ClearField("resource_arg_unique_id")
    for new, old in enumerate(keep):
        if old in arg_attr and old not in threaded:
            fdef.arg_attr[new].CopyFrom(arg_attr[old])
    outputs = list(fdef.signature.output_arg)
    for k in dropped_results:
        del fdef.ret[outputs[k].name]
    del fdef.signature.output_arg[:]
    fdef.signature.output_arg.extend(kept(outputs, dropped_results, variant_results))


def _constant(nodes: _Nodes, name: str, value) -> str:
    """A Const node holding `value` added to `nodes`; its output as the body spells it."""
    import tensorflow as tf

    node = nodes.nodes.add()
    node.name = name
    node.op = "Const"
    node.attr["dtype"].type = tf.as_dtype(value.dtype).as_datatype_enum
    node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
    nodes.by_name[name] = node
    return nodes.write(name, 0)


def _unknown_first(array):
    """The element shape with its first dim unknown: concatenated elements may differ there."""
    value = array.shape_value()
    if value.ndim:
        value = value.copy()
        value[0] = -1
    return value


def _no_dims():
    import numpy as np

    return np.zeros([0], np.int64)


def _scalar_shape():
    from tensorflow.core.framework import tensor_shape_pb2

    return tensor_shape_pb2.TensorShapeProto()


def _topological(nodes: _Nodes) -> list:
    """The nodes, each after the nodes it reads (control inputs too)."""
    from .order import postorder

    def parents(name):
        return [p for p in (ref.lstrip("^").split(":")[0] for ref in nodes.by_name[name].input) if p in nodes.by_name]

    return [nodes.by_name[name] for name in postorder([n.name for n in nodes.nodes], parents)]
