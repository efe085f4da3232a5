"""cut_out: the part of a graph that computes some tensors from others, as a graph of its own."""
import numpy as np
import tensorflow as tf

from tftvm.graph.tfgraph.subgraph import cut_out


def _graph():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        big = tf.constant(np.ones((64, 64), np.float32), name="big")
        y = tf.multiply(x, 2.0, name="y")
        with graph.colocate_with(x):  # a colocation with a node the cut leaves behind
            c = tf.constant(np.arange(3, dtype=np.float32), name="c")
        z = tf.add(y, c, name="z")
        tf.matmul(big, big, name="unrelated")
        tf.split(z, [1, 2], axis=1, name="parts")
    return graph


def test_cut_out_keeps_what_the_fetches_need_from_the_feeds(rng):
    graph = _graph()
    part, (fed,) = cut_out(graph, graph.as_graph_def(), ["y:0"], ["z:0", "parts:1"])
    names = {n.name for n in part.node}
    assert names == {fed, "c", "z", "parts", "Const", "parts/split_dim"}, names  # Const: the split sizes
    assert not any(b"loc:@" in s for n in part.node for s in n.attr["_class"].list.s)
    y = rng.standard_normal((2, 3)).astype(np.float32)
    run = tf.Graph()
    with run.as_default():
        tf.graph_util.import_graph_def(part, name="")
    with tf.compat.v1.Session(graph=run) as session:
        z, second = session.run(["z:0", "parts:1"], {f"{fed}:0": y})
    np.testing.assert_array_equal(z, y + np.arange(3, dtype=np.float32))  # y is given, not computed from x
    np.testing.assert_array_equal(second, z[:, 1:])


def test_a_fetch_that_is_fed_is_its_placeholder():
    graph = _graph()
    part, placeholders = cut_out(graph, graph.as_graph_def(), ["y:0", "c"], ["y:0"])
    assert [n.name for n in part.node] == placeholders
    assert [n.attr["dtype"].type for n in part.node] == [tf.float32.as_datatype_enum] * 2
    assert tf.TensorShape(part.node[0].attr["shape"].shape).as_list() == [None, 3]
