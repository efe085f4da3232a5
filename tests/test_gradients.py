"""grad=: a tftvm op (or TF function) as the backward, eager and in tf.function."""
import numpy as np
import pytest
import tensorflow as tf
import tftvm
from tvm import te, tirx

from conftest import make_add_bias


@pytest.fixture(scope="module")
def square_scale():
    """y = x * x * w, elementwise, with its backward written in TVM too (float64)."""
    n = te.var("n")
    x = te.placeholder((n,), "float64", name="x")
    w = te.placeholder((n,), "float64", name="w")
    y = te.placeholder((n,), "float64", name="y")
    dy = te.placeholder((n,), "float64", name="dy")
    dx = te.compute((n,), lambda i: 2.0 * x[i] * w[i] * dy[i], name="dx")
    dw = te.compute((n,), lambda i: x[i] * x[i] * dy[i], name="dw")
    backward = tftvm.op([x, w, y, dy], [dx, dw], name="square_scale_grad")
    out = te.compute((n,), lambda i: x[i] * x[i] * w[i], name="out")
    return tftvm.op([x, w], [out], name="square_scale", grad=backward)


@pytest.fixture(scope="module")
def add_bias_grad():
    """The two-output op with a backward made of TF ops."""

    def backward(a, b, c, d, dc, dd):
        da = dc + dd[:, None]
        return da, tf.reduce_sum(da, axis=0)

    return make_add_bias(width=8, name="add_bias_grad", grad=backward)


def test_compute_gradient_matches_numeric(square_scale, rng):
    x = rng.standard_normal(5)
    w = rng.standard_normal(5)
    theoretical, numerical = tf.test.compute_gradient(square_scale, [x, w])
    for t, n in zip(theoretical, numerical):
        np.testing.assert_allclose(t, n, rtol=1e-6, atol=1e-6)


def test_tape_eager_and_in_tf_function(square_scale, rng):
    x = tf.constant(rng.standard_normal(6))
    w = tf.constant(rng.standard_normal(6))

    def grads(x, w):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            loss = tf.reduce_sum(square_scale(x, w))
        return tape.gradient(loss, [x, w])

    for fn in (grads, tf.function(grads)):
        dx, dw = fn(x, w)
        np.testing.assert_allclose(dx.numpy(), 2 * x.numpy() * w.numpy(), rtol=1e-12)
        np.testing.assert_allclose(dw.numpy(), x.numpy() ** 2, rtol=1e-12)


def test_unconnected_output_gets_zero_upstream(add_bias_grad, rng):
    a = tf.Variable(rng.standard_normal((3, 8)).astype(np.float32))
    b = tf.Variable(rng.standard_normal(8).astype(np.float32))
    with tf.GradientTape() as tape:
        _, d = add_bias_grad(a, b)  # C does not reach the loss
        loss = tf.reduce_sum(d * d)
    got = tape.gradient(loss, [a, b])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.reduce_sum(a + b, axis=1) ** 2)
    want = tape.gradient(loss, [a, b])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-5)


def test_both_outputs_connected(add_bias_grad, rng):
    a = tf.Variable(rng.standard_normal((2, 8)).astype(np.float32))
    b = tf.Variable(rng.standard_normal(8).astype(np.float32))
    with tf.GradientTape() as tape:
        c, d = add_bias_grad(a, b)
        loss = tf.reduce_sum(c * 3.0) + tf.reduce_sum(d)
    da, db = tape.gradient(loss, [a, b])
    np.testing.assert_allclose(da.numpy(), np.full((2, 8), 4.0))
    np.testing.assert_allclose(db.numpy(), np.full(8, 8.0))


def test_integer_inputs_get_no_gradient(rng):
    n = te.var("n")
    x = te.placeholder((n,), "float32", name="x")
    k = te.placeholder((n,), "int32", name="k")
    y = te.compute((n,), lambda i: x[i] * tirx.Cast("float32", k[i]), name="y")
    op = tftvm.op([x, k], [y], name="scale_by_int",
                  grad=lambda x, k, y, dy: dy * tf.cast(k, tf.float32))  # fmt: skip
    xv = tf.constant([1.0, 2.0, 3.0])
    kv = tf.constant([2, 3, 4])
    with tf.GradientTape() as tape:
        tape.watch(xv)
        out = op(xv, kv)
    np.testing.assert_array_equal(tape.gradient(out, xv).numpy(), [2.0, 3.0, 4.0])


def test_wrong_number_of_gradients_is_an_error():
    n = te.var("n")
    x = te.placeholder((n,), "float32", name="x")
    op = tftvm.op([x], [te.compute((n,), lambda i: x[i] * 2.0, name="y")], name="bad_grad",
                  grad=lambda x, y, dy: (dy, dy))  # fmt: skip
    xv = tf.constant([1.0])
    with tf.GradientTape() as tape:
        tape.watch(xv)
        out = op(xv)
    with pytest.raises(ValueError, match="returned 2 gradients; it must return one per floating-point input \\(1\\)"):
        tape.gradient(out, xv)


def test_non_callable_grad_is_refused():
    x = te.placeholder((4,), "float32", name="x")
    with pytest.raises(TypeError, match="must be callable"):
        tftvm.op([x], [te.compute((4,), lambda i: x[i], name="y")], name="g", grad="auto-ish")
