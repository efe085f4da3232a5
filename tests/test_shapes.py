"""Symbolic shapes: expressions, the TF shape function, kernel-side checks, zero sizes."""
import numpy as np
import pytest
import tensorflow as tf
import tftvm
from tvm import te, tirx


@pytest.fixture(scope="module")
def concat():
    """Concatenation: output length n + m."""
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n,), "float32", name="A")
    B = te.placeholder((m,), "float32", name="B")
    C = te.compute((n + m,), lambda i: tirx.if_then_else(i < n, A[tirx.min(i, n - 1)],
                                                          B[tirx.max(i - n, 0)]), name="C")  # fmt: skip
    return tftvm.op([A, B], [C], name="concat")


@pytest.fixture(scope="module")
def shape_exprs():
    """Outputs whose dims use every supported operator."""
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), "float32", name="A")
    outs = [
        te.compute((tirx.floordiv(n, 2),), lambda i: A[i * 2, 0], name="half"),
        te.compute((tirx.floormod(n, 3),), lambda i: A[i, 0], name="rem"),
        te.compute((n * m,), lambda i: A[tirx.floordiv(i, m), tirx.floormod(i, m)], name="flat"),
        te.compute((tirx.min(n, m),), lambda i: A[i, i], name="diag"),
        te.compute((tirx.max(n, m) - 1,), lambda i: tirx.const(1.0, "float32"), name="ones"),
    ]
    return tftvm.op([A], outs, name="shape_exprs")


def test_concat_output_is_sum_of_dims(concat, rng):
    a, b = rng.standard_normal(3, dtype=np.float32), rng.standard_normal(5, dtype=np.float32)
    np.testing.assert_array_equal(concat(a, b).numpy(), np.concatenate([a, b]))


def test_every_operator_in_output_dims(shape_exprs, rng):
    for n, m in [(7, 4), (4, 7), (2, 2)]:
        a = rng.standard_normal((n, m), dtype=np.float32)
        half, rem, flat, diag, ones = shape_exprs(a)
        assert half.shape == (n // 2,) and rem.shape == (n % 3,)
        np.testing.assert_array_equal(half.numpy(), a[0:2 * (n // 2):2, 0])
        np.testing.assert_array_equal(flat.numpy(), a.reshape(-1))
        np.testing.assert_array_equal(diag.numpy(), np.diag(a)[: min(n, m)])
        np.testing.assert_array_equal(ones.numpy(), np.ones(max(n, m) - 1))


def test_shape_function_with_known_and_unknown_dims(shape_exprs):
    @tf.function(input_signature=[tf.TensorSpec([9, None])])
    def f(a):
        return shape_exprs(a)

    shapes = [t.shape.as_list() for t in f.get_concrete_function().structured_outputs]
    assert shapes == [[4], [0], [None], [None], [None]]


def test_shared_symbolic_dim_is_checked(matmul, rng):
    a = rng.standard_normal((3, 4), dtype=np.float32)
    b = rng.standard_normal((4, 5), dtype=np.float32)
    np.testing.assert_allclose(matmul(a, b).numpy(), a @ b, rtol=1e-5, atol=1e-5)
    with pytest.raises(tf.errors.InvalidArgumentError) as err:
        matmul(a, rng.standard_normal((6, 5), dtype=np.float32))
    msg = str(err.value)
    assert "tftvm op 'matmul'" in msg and "argument 'B' (input 1)" in msg
    assert "must have shape [k, m] (with n=3, k=4, m=5)" in msg and "got shape [6,5]" in msg


def test_shared_dim_mismatch_is_caught_at_trace_time(matmul):
    @tf.function(input_signature=[tf.TensorSpec([3, 4]), tf.TensorSpec([6, 5])])
    def f(a, b):
        return matmul(a, b)

    with pytest.raises(ValueError, match=r"argument 'B' \(input 1\) must have shape \[k, m\]"):
        f.get_concrete_function()


def test_shared_dim_mismatch_caught_by_kernel_when_unknown_at_trace(matmul, rng):
    f = tf.function(matmul, input_signature=[tf.TensorSpec([None, None])] * 2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="argument 'B'"):
        f(rng.standard_normal((3, 4), dtype=np.float32), rng.standard_normal((6, 5), dtype=np.float32))


def test_constant_dim_mismatch(add_bias, rng):
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"argument 'A' \(input 0\) must have shape \[n, 64\] \(with n=5\); got shape \[5,63\]"):
        add_bias(rng.standard_normal((5, 63), dtype=np.float32), np.zeros(64, np.float32))


def test_rank_mismatch_eager_and_trace(add_bias):
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"argument 'B' \(input 1\) must have rank 1"):
        add_bias(np.zeros((2, 64), np.float32), np.zeros((1, 64), np.float32))

    @tf.function(input_signature=[tf.TensorSpec([2, 64]), tf.TensorSpec([1, 64])])
    def f(a, b):
        return add_bias(a, b)

    with pytest.raises(ValueError, match=r"argument 'B' \(input 1\) must have rank 1"):
        f.get_concrete_function()


def test_zero_size_dims(add_bias, matmul):
    y, s = add_bias(np.zeros((0, 64), np.float32), np.ones(64, np.float32))
    assert y.shape == (0, 64) and s.shape == (0,)
    # A reduction over an empty axis is all zeros, as in NumPy.
    np.testing.assert_array_equal(matmul(np.zeros((2, 0), np.float32), np.zeros((0, 3), np.float32)).numpy(),
                                  np.zeros((2, 3)))  # fmt: skip


def test_output_dim_without_binding_input_is_refused():
    n = te.var("n")
    A = te.placeholder((n * 2,), "float32", name="A")
    with pytest.raises(ValueError, match="uses 'n', which no input dim determines"):
        tftvm.op([A], [te.compute((n,), lambda i: A[i * 2], name="C")])


def test_derived_input_dim_is_checked():
    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    B = te.placeholder((n + 1,), "float32", name="B")
    op = tftvm.op([A, B], [te.compute((n,), lambda i: A[i] + B[i + 1], name="C")], name="shifted")
    np.testing.assert_array_equal(op(np.ones(3, np.float32), np.arange(4, dtype=np.float32)).numpy(),
                                  [2, 3, 4])  # fmt: skip
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"must have shape \[\(n \+ 1\)\] \(with n=3\)"):
        op(np.ones(3, np.float32), np.ones(3, np.float32))


def test_unsupported_shape_expression_is_refused():
    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    with pytest.raises(ValueError, match="shape expression"):
        tftvm.op([A], [te.compute((tirx.Select(n > 2, n, 2),), lambda i: A[0], name="C")])
