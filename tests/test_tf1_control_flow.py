"""TF1 graphs (control flow v2 off, as in many frozen graphs): tf.while_loop, tf.cond and
TensorArrays as Enter/Merge/Switch/Exit and TensorArrayV3 nodes, run through optimize,
compile_model and enable() against TF running the same graph."""
import numpy as np
import pytest
import tensorflow as tf
import tftvm
from tftvm.graph.tfgraph.functionalize import V1_OPS, as_tf2
from tftvm.graph.tfgraph.tensor_arrays import ARRAY_OPS, as_tensor_lists

SPEC = [tf.TensorSpec([None, 5, 4], tf.float32)]
W = np.random.default_rng(7).standard_normal((8, 8)).astype(np.float32) * 0.3


def tf1_graph(build):
    """The GraphDef `build()` makes in a TF1 graph with TF1 control flow (placeholder "x")."""
    tf.compat.v1.disable_control_flow_v2()
    try:
        graph = tf.Graph()
        with graph.as_default():
            build(tf.compat.v1.placeholder(tf.float32, [None, 5, 4], name="x"))
        return graph.as_graph_def()
    finally:
        tf.compat.v1.enable_control_flow_v2()


def wrapped(graph_def, outputs):
    """The graph as TF2 code runs a TF1 graph: a wrapped function importing it."""
    return tf.compat.v1.wrap_function(
        lambda x: tf.graph_util.import_graph_def(graph_def, input_map={"x:0": x}, return_elements=outputs), SPEC)


def rnn(x):
    """dynamic_rnn's pattern: the time steps scattered into one array, read in the loop,
    each step's state written to another, gathered after the loop."""
    steps = tf.shape(x)[1]
    inputs = tf.TensorArray(tf.float32, size=steps).unstack(tf.transpose(x, [1, 0, 2]))
    outputs = tf.TensorArray(tf.float32, size=steps)

    def body(t, h, out):  # a gated cell: the concat's and split's axes are constants of the loop's frame
        z = tf.matmul(tf.concat([inputs.read(t), h], 1), W) + 0.1
        gate, value = tf.split(z, 2, 1)
        h = tf.sigmoid(gate) * tf.tanh(value)
        return t + 1, h, out.write(t, h)

    _, h, out = tf.while_loop(lambda t, h, o: t < steps, body, [0, tf.zeros_like(x[:, 0]), outputs])
    tf.identity(out.stack(), name="y")
    tf.identity(h, name="h")


def growing(x):
    """A loop variable whose shape changes (a relaxed shape invariant), and a cond."""
    def body(i, acc):
        row = tf.cond(tf.equal(i % 2, 0), lambda: tf.reduce_sum(x[:, i], 0, keepdims=True),
                      lambda: tf.reduce_max(x[:, i], 0, keepdims=True))  # fmt: skip
        return i + 1, tf.concat([acc, tf.exp(row) * 2.0], 0)

    _, acc = tf.while_loop(lambda i, acc: i < 5, body, [0, tf.zeros([0, 4])],
                           shape_invariants=[tf.TensorShape([]), tf.TensorShape([None, 4])])  # fmt: skip
    tf.identity(acc, name="y")
    tf.identity(tf.shape(acc), name="h")


def nested(x):
    """A loop in a loop, each step's rows into a dynamically sized array."""
    out = tf.TensorArray(tf.float32, size=0, dynamic_size=True)

    def outer(t, out):
        _, s = tf.while_loop(lambda j, s: j < 3, lambda j, s: (j + 1, tf.sigmoid(s * 1.5 + x[:, t])),
                             [0, x[:, t]])  # fmt: skip
        return t + 1, out.write(t, s)

    _, out = tf.while_loop(lambda t, o: t < 5, outer, [0, out])
    tf.identity(out.concat(), name="y")
    tf.identity(out.size(), name="h")


def straight(x):
    """Arrays outside any loop: split, read, write, size, concat."""
    rows = tf.reshape(x, [-1, 4])
    lengths = tf.constant([2, 3], tf.int64) * tf.cast(tf.shape(x)[0], tf.int64)
    ta = tf.TensorArray(tf.float32, size=2, infer_shape=False, clear_after_read=False).split(rows, lengths)
    out = tf.TensorArray(tf.float32, size=3, infer_shape=False)
    out = out.write(0, tf.tanh(ta.read(1)[:2])).write(1, ta.read(0) * 2.0).write(2, tf.exp(ta.read(1)[2:]))
    tf.identity(out.concat(), name="y")
    tf.identity(out.size() + ta.size(), name="h")


def inner_arrays(x):
    """Arrays made inside a loop body: each outer step fills one in a loop of its own."""
    def outer(t, h):
        steps = tf.TensorArray(tf.float32, size=3)
        _, steps = tf.while_loop(lambda j, a: j < 3, lambda j, a: (j + 1, a.write(j, tf.tanh(h * tf.cast(j + 1, tf.float32)))),
                                 [0, steps])  # fmt: skip
        return t + 1, tf.reduce_mean(steps.stack(), 0) + x[:, t]

    _, h = tf.while_loop(lambda t, h: t < 5, outer, [0, tf.zeros_like(x[:, 0])])
    tf.identity(h, name="y")
    tf.identity(tf.shape(h), name="h")


def cond_arrays(x):
    """An array written in a tf.cond's branches (each a different value), then stacked."""
    out = tf.TensorArray(tf.float32, size=2).write(0, x[:, 0])
    out = tf.cond(tf.reduce_sum(x) > 0, lambda: out.write(1, tf.exp(x[:, 1])), lambda: out.write(1, x[:, 2] * 2.0))
    tf.identity(out.stack(), name="y")
    tf.identity(out.size(), name="h")


GRAPHS = {"rnn": rnn, "growing": growing, "nested": nested, "straight": straight, "inner_arrays": inner_arrays,
          "cond_arrays": cond_arrays}  # fmt: skip


def _paths(fn):
    import contextlib

    yield "optimize", tftvm.optimize(fn, SPEC, keep_faster=False, min_cluster_size=1)
    yield "compile_model", tftvm.compile_model(fn, SPEC, keep_faster=False)
    with contextlib.ExitStack() as stack:
        stack.enter_context(tftvm.enabled(keep_faster=False, min_cluster_size=1))
        yield "enable", tf.function(lambda x: fn(x))


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_tf1_graph_through_the_paths_as_tf(name, rng):
    graph_def = tf1_graph(GRAPHS[name])
    assert {n.op for n in graph_def.node} & V1_OPS or name == "straight"
    fn = wrapped(graph_def, ["y:0", "h:0"])
    feeds = [rng.standard_normal((batch, 5, 4)).astype(np.float32) for batch in (3, 1)]
    wants = [[t.numpy() for t in fn(tf.constant(x))] for x in feeds]
    for path, run in _paths(fn):
        for x, want in zip(feeds, wants):
            got = [np.asarray(t) for t in run(tf.constant(x))]
            for g, w in zip(got, want):
                assert g.shape == w.shape, (path, g.shape, w.shape)
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=path)


def test_tf1_loop_body_runs_in_tvm_as_a_tf2_loop_does():
    """The TF1 loop becomes a While whose arrays are TensorLists, so its body is offloaded."""
    fn = wrapped(tf1_graph(rnn), ["y:0", "h:0"])
    optimized = tftvm.optimize(fn, SPEC, keep_faster=False, min_cluster_size=1)
    report = optimized.report()
    assert "TensorArray" not in report and "Merge" not in report, report
    body = [line for line in report.splitlines() if line.startswith("body of")]
    assert body and "compute nodes in TVM" in body[0], report
    # all of it: ConcatV2, MatMul, AddV2 (twice), Split, Sigmoid, Tanh, Mul
    assert int(body[0].split(": ")[1].split()[0]) == 8, report


def test_tensor_arrays_become_lists_with_their_element_shapes():
    graph_def = as_tf2(tf1_graph(rnn))
    ops = {n.op for n in graph_def.node} | {n.op for f in graph_def.library.function for n in f.node_def}
    assert not ops & (ARRAY_OPS | V1_OPS), ops
    assert {"While", "TensorListReserve", "TensorListGetItem", "TensorListSetItem"} <= ops, ops
    (loop,) = [n for n in graph_def.node if n.op == "While"]
    assert tf.dtypes.as_dtype(tf.dtypes.variant).as_datatype_enum in loop.attr["T"].list.type
    assert tf.TensorShape(loop.attr["output_shapes"].list.shape[1]).as_list() == [None, 4]  # h


def test_an_array_used_another_way_stays_a_tf1_array():
    """A gradient array (TensorArrayGradV3 reads the handle): the rewrite leaves the graph as
    it is, in TF, rather than guess."""
    def build(x):
        ta = tf.TensorArray(tf.float32, size=5).unstack(tf.transpose(x, [1, 0, 2]))
        grad = tf.raw_ops.TensorArrayGradV3(handle=ta.handle, flow_in=ta.flow, source="g")
        tf.identity(ta.read(2), name="y")
        tf.identity(grad.flow_out, name="h")

    graph_def = tf1_graph(build)
    assert as_tensor_lists(graph_def) is graph_def


def test_a_tf1_saved_model_under_enable(tmp_path, rng):
    """A SavedModel of a TF1 session (saved_model.Builder), loaded and served with TF2:
    enable() rewrites its signature's graph, loop body included."""
    from tftvm import enable_pass

    path = str(tmp_path / "tf1_model")
    tf.compat.v1.disable_control_flow_v2()
    try:
        graph = tf.Graph()
        with graph.as_default(), tf.compat.v1.Session() as session:
            x = tf.compat.v1.placeholder(tf.float32, [None, 5, 4], name="x")
            rnn(x)
            outputs = {"y": graph.get_tensor_by_name("y:0"), "h": graph.get_tensor_by_name("h:0")}
            builder = tf.compat.v1.saved_model.Builder(path)
            signature = tf.compat.v1.saved_model.predict_signature_def({"x": x}, outputs)
            builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={"serving_default": signature})
            builder.save()
    finally:
        tf.compat.v1.enable_control_flow_v2()
    x = tf.constant(rng.standard_normal((3, 5, 4)).astype(np.float32))
    want = tf.saved_model.load(path).signatures["serving_default"](x=x)
    before = len(enable_pass.rewrites())
    with tftvm.enabled(keep_faster=False, min_cluster_size=1):
        got = tf.saved_model.load(path).signatures["serving_default"](x=x)
    done = enable_pass.rewrites()[before:]
    assert done and "body of while/LoopCond: 8 compute nodes in TVM" in done[-1].report, done[-1].report if done else None
    for name in want:
        np.testing.assert_allclose(got[name].numpy(), want[name].numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


def test_shape_and_size_of_an_imported_graph_fold():
    """Shape and Size of a static input in a GraphDef imported with import_graph_def (its
    placeholder None there, static in the wrapped function) become constants or shape values:
    nothing stays in TF."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        dims = tf.shape(x)
        y = tf.reshape(tf.exp(x) * 2.0, tf.stack([dims[1], dims[0]]), name="y")
        tf.add(tf.cast(tf.size(x), tf.float32), tf.reduce_sum(y), name="z")
    fn = tf.compat.v1.wrap_function(lambda x: tf.graph_util.import_graph_def(
        graph.as_graph_def(), input_map={"x:0": x}, return_elements=["y:0", "z:0"]), [tf.TensorSpec([2, 3])])
    optimized = tftvm.optimize(fn, [tf.TensorSpec([2, 3])], keep_faster=False, min_cluster_size=1)
    assert "(100.0%)" in optimized.report().splitlines()[0], optimized.report()
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 6
    for got, want in zip(optimized(x), fn(tf.constant(x))):
        np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_every_graph_here_takes_tf2s_forms_whole(name):
    """No TF1 control flow node and no TF1 array left, in the graph or its functions (arrays
    made inside a loop body included): nothing of it falls back to TF1's forms."""
    graph_def = as_tf2(tf1_graph(GRAPHS[name]))
    ops = {n.op for n in graph_def.node} | {n.op for f in graph_def.library.function for n in f.node_def}
    assert not ops & (ARRAY_OPS | V1_OPS), sorted(ops & (ARRAY_OPS | V1_OPS))
