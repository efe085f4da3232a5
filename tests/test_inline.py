"""Inlining nested function calls (graph/inline.py): Keras 3 jit-compiled layers reach TVM."""
import keras
import numpy as np
import pytest
import tensorflow as tf
import tftvm
from tftvm.graph.tfgraph.freeze import freeze
from tftvm.graph.tfgraph.inline import CALL_OPS, call_nodes, inline_calls

TOL = dict(rtol=1e-4, atol=1e-4)


def _calls(graph_def):
    return [n.name for n in graph_def.node if n.op in CALL_OPS]


def _run(graph_def, feeds, fetches):
    """Run a GraphDef in a v1 session, as TF itself runs it."""
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    with tf.compat.v1.Session(graph=graph) as sess:
        return sess.run(fetches, feeds)


def _stayed_in_tf(report: str) -> str:
    return "\n".join(line for line in report.splitlines() if line.startswith("stayed in TF"))


def _offload(report: str):
    first = report.splitlines()[0]  # "compute nodes: N, offloaded to TVM: M (P%)"
    n, m = first.split(",")
    return int(n.split(":")[1]), int(m.split(":")[1].split("(")[0])


def _check_end_to_end(fn, spec, shape, rng, tf_ops):
    """No call nodes after freeze; optimize and compile_model match TF at batch 1 and 3; the
    formerly nested `tf_ops` run in TVM."""
    frozen = freeze(fn, [spec])
    assert _calls(frozen.graph_def) == []
    ops = {n.op for n in frozen.graph_def.node}
    assert not ops & {"ReadVariableOp", "VarHandleOp"}  # the bodies' variables are constants
    assert {n.op for n in frozen.graph_def.node} >= set(tf_ops)
    opt = tftvm.optimize(fn, [spec])
    exe = tftvm.compile_model(fn, [spec])
    for batch in (1, 3):
        x = rng.standard_normal((batch, *shape)).astype(np.float32)
        want = fn(x)
        np.testing.assert_allclose(opt(x), want, **TOL)
        np.testing.assert_allclose(exe(x), want, **TOL)
    report = opt.report()
    stayed = _stayed_in_tf(report)
    for op in (*tf_ops, "PartitionedCall", "StatefulPartitionedCall"):
        assert f"stayed in TF: {op} " not in stayed, report
    compute, offloaded = _offload(report)
    assert offloaded >= len(tf_ops) and offloaded > compute // 2, report
    return opt


def test_nested_and_jit_functions_are_inlined(rng):
    w = tf.Variable(rng.standard_normal((4, 4)).astype(np.float32))
    v = tf.Variable(rng.standard_normal((4,)).astype(np.float32))

    @tf.function(jit_compile=True)
    def jit_two(x, y):  # a jit function (grappler keeps it a call) with two outputs
        a = tf.matmul(x, w)
        return tf.nn.tanh(a + y) * v, tf.nn.relu(a - y)

    @tf.function
    def inner(x):
        a, b = jit_two(x, x * 3.0)
        return a + b

    @tf.function(input_signature=[tf.TensorSpec([None, 4])])
    def outer(x):
        return tf.nn.sigmoid(inner(x)) + 1.0

    before = outer.get_concrete_function().graph.as_graph_def()
    assert call_nodes(before)  # the traced graph does call them
    _check_end_to_end(outer, tf.TensorSpec([None, 4]), (4,), rng, ["MatMul", "Tanh", "Relu"])


def test_inline_calls_keeps_outputs_and_control_dependencies(rng):
    """On an unfrozen GraphDef: multi-output nested calls, a call with control inputs, a body
    whose control output is an Assert; TF's own results (and errors) stay the same."""

    @tf.function
    def checked(x):  # control_ret: the Assert
        tf.debugging.assert_less(tf.reduce_max(x), 10.0)
        return x * 2.0, tf.reduce_sum(x, axis=1)

    @tf.function(jit_compile=True)
    def jit(x):
        return tf.nn.tanh(x) + tf.constant(1.0)  # a Const without inputs in the body

    @tf.function(input_signature=[tf.TensorSpec([None, 3])])
    def outer(x):
        a, s = checked(x)
        ok = tf.debugging.assert_greater(tf.reduce_min(x), -10.0)
        with tf.control_dependencies([ok]):
            b = jit(a)
        return b, s

    graph = outer.get_concrete_function().graph
    graph_def = graph.as_graph_def()
    assert len(call_nodes(graph_def)) == 2
    inlined = inline_calls(graph_def)
    assert call_nodes(inlined) == []
    branches = {n.attr[a].func.name for n in inlined.node if n.op in ("If", "StatelessIf")
                for a in ("then_branch", "else_branch")}  # the asserts' guards: kept, not inlined
    assert branches and {f.signature.name for f in inlined.library.function} == branches
    nodes = {n.name: n for n in inlined.node}
    jit_call = next(n for n in graph_def.node if n.op in CALL_OPS and list(n.input)[-1][0] == "^")
    controls = [i for i in jit_call.input if i.startswith("^")]
    body_const = [n for n in inlined.node if n.name.startswith(jit_call.name + "/") and n.op == "Const"]
    assert body_const and all(set(controls) <= set(n.input) for n in body_const)
    checked_call = next(n for n in graph_def.node if n.op in CALL_OPS and n is not jit_call)
    assert nodes[checked_call.name].op == "IdentityN"
    assert any(i.startswith("^" + checked_call.name + "/") for i in nodes[checked_call.name].input)

    x_name = graph.inputs[0].name
    fetches = [t.name for t in graph.outputs]
    for batch in (1, 3):
        x = rng.standard_normal((batch, 3)).astype(np.float32)
        for got, want in zip(_run(inlined, {x_name: x}, fetches), outer(x)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # XLA vs TF kernels
    for bad in (np.full((2, 3), 20.0, np.float32), np.full((2, 3), -20.0, np.float32)):
        with pytest.raises(tf.errors.InvalidArgumentError):
            outer(bad)
        with pytest.raises(tf.errors.InvalidArgumentError):
            _run(inlined, {x_name: bad}, fetches)


def test_control_flow_stays_and_its_functions_are_kept(rng):
    @tf.function(jit_compile=True)
    def step(x):
        return x * 0.5 + 1.0

    @tf.function(input_signature=[tf.TensorSpec([None, 2])])
    def loop(x):
        _, y = tf.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y + 1.0), [0, x])
        return step(y)

    graph = loop.get_concrete_function().graph
    graph_def = graph.as_graph_def()
    inlined = inline_calls(graph_def)
    assert call_nodes(inlined) == []
    whiles = [n for n in inlined.node if n.op in ("While", "StatelessWhile")]
    assert whiles
    kept = {f.signature.name for f in inlined.library.function}
    assert {whiles[0].attr["body"].func.name, whiles[0].attr["cond"].func.name} <= kept
    assert step.get_concrete_function(tf.TensorSpec([None, 2])).name.decode() not in kept
    x = rng.standard_normal((3, 2)).astype(np.float32)
    got = _run(inlined, {graph.inputs[0].name: x}, graph.outputs[0].name)
    np.testing.assert_allclose(got, loop(x), rtol=1e-5, atol=1e-6)  # XLA vs TF kernels


def test_depth_limit_leaves_deeper_calls(rng):
    @tf.function(jit_compile=True)
    def f1(x):
        return x + 1.0

    @tf.function(jit_compile=True)
    def f2(x):
        return f1(x) * 2.0

    @tf.function(input_signature=[tf.TensorSpec([None])])
    def top(x):
        return f2(x) - 1.0

    graph = top.get_concrete_function().graph
    graph_def = graph.as_graph_def()
    assert inline_calls(graph_def, max_depth=0) == graph_def
    once = inline_calls(graph_def, max_depth=1)
    assert len(call_nodes(once)) == 1 and len(once.library.function) == 1
    assert call_nodes(inline_calls(graph_def)) == []
    x = rng.standard_normal(5).astype(np.float32)
    for g in (once, inline_calls(graph_def)):
        got = _run(g, {graph.inputs[0].name: x}, graph.outputs[0].name)
        np.testing.assert_allclose(got, top(x), rtol=1e-5)


def test_keras_grouped_and_depthwise_convs_reach_tvm(rng):
    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 4))
    h = keras.layers.Conv2D(8, 3, padding="same", groups=2, activation="relu")(inp)
    h = keras.layers.DepthwiseConv2D(3, padding="same")(h)
    h = keras.layers.Conv2D(4, 1)(h)
    model = keras.Model(inp, h)
    spec = tf.TensorSpec([None, 8, 8, 4])
    ops = {n.op for n in freeze(model, [spec]).graph_def.node}
    assert "DepthwiseConv2dNative" in ops
    opt = _check_end_to_end(model, spec, (8, 8, 4), rng, ["Conv2D", "DepthwiseConv2dNative"])
    # the bodies' leftover control edges (frozen ReadVariableOps) do not cut the chain in two
    assert sum(line.startswith("cluster ") for line in opt.report().splitlines()) == 1, opt.report()


def test_colocation_with_a_body_node_names_it_as_inlined(rng):
    """A body node colocated with another (`_class: loc:@x`, what TF's gradients ask for)
    names the inlined node: an unknown name would make the graph fail to import."""

    @tf.function
    def inner(x):
        doubled = tf.multiply(x, 2.0, name="doubled")  # a name the outer graph does not have
        with tf.compat.v1.colocate_with(doubled.op):
            return doubled + 1.0

    @tf.function
    def outer(x):
        return inner(x) * 3.0

    graph_def = outer.get_concrete_function(tf.TensorSpec((4,), tf.float32)).graph.as_graph_def()
    inlined = inline_calls(graph_def)
    assert _calls(inlined) == []
    names = {n.name for n in inlined.node}
    located = [c.decode()[5:] for n in inlined.node for c in n.attr["_class"].list.s]
    assert located and set(located) <= names, (located, sorted(names))
    x = rng.standard_normal(4).astype(np.float32)
    placeholder = next(n.name for n in inlined.node if n.op == "Placeholder")
    result = _run(inlined, {f"{placeholder}:0": x}, "Identity:0")
    np.testing.assert_allclose(result, (x * 2.0 + 1.0) * 3.0, rtol=1e-6)
