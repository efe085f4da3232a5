"""The op bridge on the issue's own example: eager, tf.function, static shapes."""
import numpy as np
import tensorflow as tf


def reference(x, b):
    c = x + b
    return c, c.sum(axis=1)


def test_eager_matches_numpy(add_bias, rng):
    x = rng.standard_normal((5, 64), dtype=np.float32)
    b = rng.standard_normal(64, dtype=np.float32)
    y, s = add_bias(x, b)
    want_y, want_s = reference(x, b)
    np.testing.assert_array_equal(y.numpy(), want_y)
    np.testing.assert_allclose(s.numpy(), want_s, rtol=1e-5, atol=1e-5)


def test_tf_function_matches_numpy(add_bias, rng):
    x = rng.standard_normal((7, 64), dtype=np.float32)
    b = rng.standard_normal(64, dtype=np.float32)
    y, s = tf.function(add_bias)(x, b)
    assert y.shape == (7, 64) and s.shape == (7,)
    np.testing.assert_array_equal(y.numpy(), reference(x, b)[0])


def test_symbolic_signature_gives_static_shapes(add_bias, rng):
    f = tf.function(add_bias, input_signature=[tf.TensorSpec([None, 64]), tf.TensorSpec([64])])
    y, s = f.get_concrete_function().structured_outputs
    assert y.shape.as_list() == [None, 64]
    assert s.shape.as_list() == [None]
    for n in (1, 3, 33):
        x = rng.standard_normal((n, 64), dtype=np.float32)
        b = rng.standard_normal(64, dtype=np.float32)
        got = f(x, b)
        np.testing.assert_allclose(got[1].numpy(), reference(x, b)[1], rtol=1e-5, atol=1e-4)


def test_known_dims_propagate_at_trace_time(add_bias):
    seen = {}

    @tf.function(input_signature=[tf.TensorSpec([4, 64])])
    def f(x):
        y, s = add_bias(x, tf.zeros([64]))
        seen["shapes"] = (y.shape.as_list(), s.shape.as_list())
        return s

    f.get_concrete_function()
    assert seen["shapes"] == ([4, 64], [4])


def test_op_inside_a_larger_graph(add_bias, rng):
    x = rng.standard_normal((6, 64), dtype=np.float32)
    b = rng.standard_normal(64, dtype=np.float32)

    @tf.function
    def model(x):
        y, s = add_bias(tf.nn.relu(x), b)
        return tf.reduce_mean(y, axis=1) * 64.0 - s

    np.testing.assert_allclose(model(x).numpy(), np.zeros(6), atol=1e-4)


def test_repr_describes_signature(add_bias):
    assert repr(add_bias) == (
        "<tftvm op add_bias(A: float32[n, 64], B: float32[64]) -> (float32[n, 64], float32[n])>"
    )


def test_eager_calls_carry_no_module_bytes_and_graph_nodes_do(add_bias):
    @tf.function(input_signature=[tf.TensorSpec([None, 64]), tf.TensorSpec([64])])
    def f(x, b):
        return add_bias(x, b)

    graph = f.get_concrete_function().graph
    (node,) = [n for n in graph.as_graph_def().node if n.op == "TvmCall"]
    assert node.attr["module"].s == add_bias.kernel.library
    assert node.attr["key"].s.decode() == add_bias.kernel.key
    assert add_bias._tftvm_eager_attrs.get("module") is None
