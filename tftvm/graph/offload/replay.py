"""Replay the frozen graph with each cluster replaced by its tftvm kernels.

The frozen graph is replayed in topological order of "steps" (single TF nodes
and whole clusters) inside a new tf.function: a TF node is re-imported with
its inputs mapped to the replayed tensors (a node that calls library functions,
such as a While or an If, is imported with them, and they are registered with the
eager context that runs the traced function); a cluster is called as a
RelaxProgram. The result is an ordinary traceable, savable TF function.
"""
from __future__ import annotations

import dataclasses

from ..tfgraph.functions import functions_called, graph_runner, register_functions
from ..tfgraph.names import tensor_inputs, without_control_inputs


@dataclasses.dataclass(eq=False)  # hashed by identity: a step is a node of the schedule
class ClusterStep:
    index: int
    nodes: list  # NodeDefs
    inputs: list  # tensor names consumed from outside, in program order
    outputs: list  # tensor names produced for outside consumers
    program: object = None  # RelaxProgram once compiled
    compile_seconds: float = 0.0
    error: str | None = None
    timings: dict = dataclasses.field(default_factory=dict)  # safety_net.Timing by the size of its None dims
    switch: object = None  # safety_net.SizeSwitch where TF is faster at some sizes only


def cluster_boundary(nodes, frozen, consumers) -> tuple[list, list]:
    """External input tensors and externally consumed output tensors of a node set."""
    names = {n.name for n in nodes}
    inputs: list[str] = []
    for n in nodes:
        for t in tensor_inputs(n):
            if t.split(":")[0] not in names and t not in inputs:
                inputs.append(t)
    graph_outputs = {t.name for t in frozen.outputs}
    outputs = []
    for n in nodes:
        for t in frozen.graph.get_operation_by_name(n.name).outputs:
            used_outside = any(c not in names for c in consumers.get(t.name, ()))
            if used_outside or t.name in graph_outputs:
                outputs.append(t.name)
    return inputs, outputs


def replay(frozen, steps, order):
    """A Python function of the graph inputs that replays `order` (node names or ClusterSteps)."""
    import tensorflow as tf

    by_name = {n.name: n for n in frozen.graph_def.node}
    library = {f.signature.name: f for f in frozen.graph_def.library.function}
    input_names = [t.name for t in frozen.inputs]

    def run(*args):
        env = dict(zip(input_names, args))
        done = {name.split(":")[0]: [arg.op] for name, arg in env.items()}  # node -> its ops now
        for step in order:
            if isinstance(step, ClusterStep):
                # A scope of its own: the ops a cluster creates (TvmCall, a size switch's cond)
                # must not take the names of graph nodes replayed after it (TF finds a
                # function's control outputs by name).
                with tf.name_scope(f"tftvm_cluster{step.index}"):
                    result = run_cluster(step, [env[t] for t in step.inputs])
                env.update(zip(step.outputs, result))
                done.update((n.name, [t.op for t in result]) for n in step.nodes)
                continue
            node = by_name[step]
            if node.op == "Placeholder":
                continue
            op = frozen.graph.get_operation_by_name(node.name)
            graph_def = tf.compat.v1.GraphDef(node=[without_control_inputs(node)])
            graph_def.versions.CopyFrom(frozen.graph_def.versions)
            called = functions_called(node, library)
            if called:  # While/If bodies and the functions they call come along with it
                graph_def.library.function.extend(called)
                register_functions(called)
            imported = tf.graph_util.import_graph_def(
                graph_def, input_map={t: env[t] for t in tensor_inputs(node)},
                return_elements=[t.name for t in op.outputs] or [node.name], name="",
            )  # fmt: skip
            new_op = imported[0] if isinstance(imported[0], tf.Operation) else imported[0].op
            # Control edges keep their order, onto whatever now computes their source.
            deps = [d for i in node.input if i.startswith("^") for d in done[i[1:]]]
            if deps:
                new_op._add_control_inputs(deps)  # TF-internal, what TF's auto control deps use
            env.update((t.name, v) for t, v in zip(op.outputs, imported))
            done[node.name] = [new_op]
            if new_op.name != node.name:  # TF took the name (a scope of that name came first)
                run.renamed[new_op.name] = node.name
        return [env[t.name] for t in frozen.outputs]

    run.renamed = {}  # replayed node's name -> its original name, where TF had to change it
    return run


def run_cluster(step, args) -> tuple:
    """`step`'s outputs: its TVM kernels' or, behind its size switch, its TF nodes' where
    those are faster at the size of `args`."""
    import tensorflow as tf

    def in_tvm():
        result = step.program(*args)
        return tuple(result) if isinstance(result, (tuple, list)) else (result,)

    if step.switch is None:
        return in_tvm()
    switch = step.switch

    def in_tf():  # import_graph_def maps only tensors of the branch's graph: identities capture them
        return tuple(graph_runner(switch.graph_def, step.inputs, step.outputs)(*[tf.identity(a) for a in args]))

    size = tf.add_n([tf.size(args[i], out_type=tf.int64) for i in switch.dynamic])
    large, small = (in_tf, in_tvm) if switch.tf_when_large else (in_tvm, in_tf)
    return tuple(tf.cond(size >= switch.elements, large, small))
