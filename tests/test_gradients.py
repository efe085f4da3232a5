"""grad=: a tftvm op (or TF function) as the backward, eager and in tf.function."""
import numpy as np
import pytest
import tensorflow as tf
import tftvm
from tvm import te, tirx
from tvm.script import tirx as T

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


def test_compute_gradient_of_a_two_output_op(add_bias_grad, rng):
    a = rng.standard_normal((2, 8)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    for index in (0, 1):
        theoretical, numerical = tf.test.compute_gradient(lambda a, b: add_bias_grad(a, b)[index], [a, b])
        for t, n in zip(theoretical, numerical):
            np.testing.assert_allclose(t, n, rtol=1e-2, atol=1e-2)  # float32 finite differences


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


@pytest.mark.no_op_check  # its gradient is wrong on purpose
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


# grad="auto": the backward derived from the TE compute itself.

def check_auto_gradient(make_outputs, shapes, rng, name):
    placeholders = [te.placeholder(s, "float64", name=f"x{i}") for i, s in enumerate(shapes)]
    outputs = make_outputs(*placeholders)
    op = tftvm.op(placeholders, outputs, name=name, grad="auto")
    args = [rng.uniform(0.5, 1.5, s) for s in shapes]
    for index in range(len(outputs)):
        f = (lambda *a, index=index: op(*a)[index]) if len(outputs) > 1 else op
        theoretical, numerical = tf.test.compute_gradient(f, args)
        for t, n in zip(theoretical, numerical):
            np.testing.assert_allclose(t, n, rtol=1e-5, atol=1e-6)


def test_auto_grad_fused_two_output_stages(rng):
    def build(a, b):
        c = te.compute((3, 4), lambda i, j: tirx.exp(a[i, j]) * b[j] + a[i, j] * a[i, j], name="c")
        k = te.reduce_axis((0, 4), "k")
        return [c, te.compute((3,), lambda i: te.sum(c[i, k] * b[k], axis=k), name="d")]

    check_auto_gradient(build, [(3, 4), (4,)], rng, "auto_fused")


def test_auto_grad_matmul_and_transpose(rng):
    def build(a, b):
        r = te.reduce_axis((0, 4), "r")
        return [te.compute((3, 5), lambda i, j: te.sum(a[r, i] * b[r, j], axis=r), name="atb")]

    check_auto_gradient(build, [(4, 3), (4, 5)], rng, "auto_atb")


@pytest.mark.parametrize("fn", [
    lambda x, y: tirx.tanh(x) / y, lambda x, y: tirx.sigmoid(x) - tirx.log(y),
    lambda x, y: tirx.sqrt(x * y), lambda x, y: tirx.max(x, y) * tirx.min(x, y),
    lambda x, y: tirx.Select(x > y, x * 2.0, y), lambda x, y: tirx.Cast("float64", tirx.Cast("float32", x)) + y,
], ids=["tanh_div", "sigmoid_log", "sqrt", "max_min", "select", "cast"])  # fmt: skip
def test_auto_grad_elementwise_rules(fn, rng):
    def build(a, b):
        return [te.compute((6,), lambda i: fn(a[i], b[i]), name="y")]

    check_auto_gradient(build, [(6,), (6,)], rng, "auto_rule")


def test_auto_grad_in_tape_with_symbolic_shapes(rng):
    n = te.var("n")
    x = te.placeholder((n, 3), "float32", name="x")
    w = te.placeholder((3,), "float32", name="w")
    k = te.reduce_axis((0, 3), "k")
    y = te.compute((n,), lambda i: te.sum(x[i, k] * w[k], axis=k), name="y")
    op = tftvm.op([x, w], [y], name="auto_matvec", grad="auto")
    xv = tf.constant(rng.standard_normal((5, 3)).astype(np.float32))
    wv = tf.constant(rng.standard_normal(3).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 3]), tf.TensorSpec([3])])
    def grads(x, w):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            loss = tf.reduce_sum(op(x, w) ** 2)
        return tape.gradient(loss, [x, w])

    dx, dw = grads(xv, wv)
    residual = 2 * (xv.numpy() @ wv.numpy())
    np.testing.assert_allclose(dx.numpy(), residual[:, None] * wv.numpy()[None, :], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dw.numpy(), xv.numpy().T @ residual, rtol=1e-5, atol=1e-5)


def test_auto_grad_refuses_shifted_access():
    n = te.var("n")
    x = te.placeholder((n,), "float32", name="x")
    y = te.compute((n - 1,), lambda i: x[i + 1] - x[i], name="diff")
    with pytest.raises(NotImplementedError, match="not a distinct loop variable; give grad= yourself"):
        tftvm.op([x], [y], name="auto_shifted", grad="auto")


@T.prim_func
def copy(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
    for i in range(4):
        B[i] = A[i]


def test_auto_grad_needs_the_te_form():
    with pytest.raises(ValueError, match="needs the TE form"):
        tftvm.op(copy, grad="auto")
