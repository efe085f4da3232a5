"""Scalar PrimFunc parameters: rank-0 TF tensors passed to TVM by value.

An integer scalar can set a shape variable that no input dim gives on its own
(Relax's fused kernels take symbolic dims this way), and then sizes outputs.
"""
import numpy as np
import pytest
import tensorflow as tf
import tftvm
from tvm.script import tirx as T


@T.prim_func
def unflatten(a: T.handle, n: T.int64, s: T.float32, b: T.handle):
    A = T.match_buffer(a, (n * 4,), "float32")
    B = T.match_buffer(b, (n, 4), "float32")
    for i, j in T.grid(n, 4):
        B[i, j] = A[i * 4 + j] * s


@T.prim_func
def shift(A: T.Buffer((8,), "int32"), k: T.int32, flip: T.bool, B: T.Buffer((8,), "int32")):
    for i in range(8):
        B[i] = T.if_then_else(flip, A[7 - i], A[i]) + k


@pytest.fixture(scope="module")
def unflatten_op():
    return tftvm.op(unflatten)


def test_int_scalar_sets_the_output_shape(unflatten_op, rng):
    x = rng.standard_normal(12).astype(np.float32)
    got = unflatten_op(x, 3, 2.5)
    np.testing.assert_allclose(got.numpy(), x.reshape(3, 4) * np.float32(2.5), rtol=1e-6)
    assert "n: int64 (scalar)" in repr(unflatten_op)


def test_scalar_known_to_tf_gives_a_static_shape(unflatten_op):
    static = tf.function(lambda x: unflatten_op(x, 5, 1.0))
    assert static.get_concrete_function(tf.TensorSpec([None])).output_shapes.as_list() == [5, 4]
    dynamic = tf.function(lambda x, n: unflatten_op(x, n, 1.0))
    spec = dynamic.get_concrete_function(tf.TensorSpec([None]), tf.TensorSpec([], tf.int64))
    assert spec.output_shapes.as_list() == [None, 4]
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(dynamic(x, tf.constant(2, tf.int64)).numpy(), x.reshape(2, 4))


def test_scalar_that_disagrees_with_a_dim_is_an_error(unflatten_op):
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"argument 'A' \(input 0\) must have shape \[\(n \* 4\)\] \(with n=4\); got shape \[12\]"):  # fmt: skip
        unflatten_op(np.zeros(12, np.float32), 4, 1.0)


def test_non_scalar_for_a_scalar_param_is_an_error(unflatten_op):
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"argument 'n' \(input 1\) must be a scalar \(rank 0\); got shape \[1\]"):  # fmt: skip
        unflatten_op(np.zeros(4, np.float32), [1], 1.0)
    with pytest.raises(TypeError, match=r"argument 's' \(input 2\) must have dtype float32, got int32"):
        unflatten_op(np.zeros(4, np.float32), 1, tf.constant(1))


def test_int_and_bool_scalars_without_shape_roles(rng):
    op = tftvm.op(shift)
    x = rng.integers(-50, 50, 8).astype(np.int32)
    np.testing.assert_array_equal(op(x, 7, False).numpy(), x + 7)
    np.testing.assert_array_equal(op(x, -3, True).numpy(), x[::-1] - 3)
    graph = tf.function(lambda x, k: op(x, k, True))
    np.testing.assert_array_equal(graph(x, tf.constant(1)).numpy(), x[::-1] + 1)
