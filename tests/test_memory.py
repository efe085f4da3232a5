"""Zero copy where TVM can take TF's buffer, one copy where it cannot (misaligned views)."""
import numpy as np
import pytest
import tensorflow as tf
import tftvm
from tvm import te


@pytest.fixture(scope="module")
def double():
    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    return tftvm.op([A], [te.compute((n,), lambda i: A[i] * 2.0, name="B")], name="double")


def test_misaligned_input_is_copied_not_misread(double):
    base = np.arange(65, dtype=np.float32)
    view = base[1:]  # 4 bytes past a 64-byte boundary at best
    assert view.ctypes.data % 64 != 0
    # from_dlpack wraps NumPy's memory without a copy, misalignment included.
    t = tf.experimental.dlpack.from_dlpack(view.__dlpack__())
    np.testing.assert_array_equal(double(t).numpy(), view * 2)


def test_output_is_written_in_place_into_tf_memory(double):
    # Outputs are TF-allocated tensors: a consumer op sees TVM's writes directly.
    out = double(tf.range(8, dtype=tf.float32))
    assert np.asarray(out).ctypes.data % 64 == 0
    np.testing.assert_array_equal(tf.reduce_sum(out).numpy(), 56.0)


def test_large_tensor(double):
    x = tf.random.uniform([4 << 20])
    np.testing.assert_array_equal(double(x).numpy(), x.numpy() * 2)
