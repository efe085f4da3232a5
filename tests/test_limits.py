"""Outputs too big to allocate fail with TF's errors, not an abort."""
import numpy as np
import pytest
import tensorflow as tf
import tftvm
from tvm.script import tirx as T


@T.prim_func
def fill(n: T.int64, value: T.float32, b: T.handle):
    B = T.match_buffer(b, (n, 4), "float32")
    for i, j in T.grid(n, 4):
        B[i, j] = value


@pytest.fixture(scope="module")
def fill_op():
    return tftvm.op(fill)


def test_fill_works(fill_op):
    np.testing.assert_array_equal(fill_op(3, 2.5).numpy(), np.full((3, 4), 2.5, np.float32))


def test_output_larger_than_memory_is_resource_exhausted(fill_op):
    # 2**46 x 4 floats is 1 PiB: more than any machine's memory and address space. (Eager and
    # graph calls run the same kernel; TF's allocator retries for 10 s before it gives up.)
    f = tf.function(lambda n: fill_op(n, 1.0))
    with pytest.raises(tf.errors.ResourceExhaustedError):
        f(tf.constant(2**46, tf.int64))
    np.testing.assert_array_equal(fill_op(2, 1.0).numpy(), np.ones((2, 4), np.float32))  # still fine after


def test_output_size_overflow_is_invalid_argument(fill_op):
    with pytest.raises(tf.errors.InvalidArgumentError):
        fill_op(2**62, 1.0)  # 2**64 elements: more than TensorShape can count
    with pytest.raises(tf.errors.InvalidArgumentError, match="not a valid size"):
        fill_op(-1, 1.0)
