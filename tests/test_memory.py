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


def test_a_frozen_model_holds_each_weight_once(rng):
    """Freezing reads a variable once per use (here a matmul, a sum and a loop body); TF's
    constant folding wrote a Const for each of those reads, and every copy of the graph (each
    import, each graph cut out for a TF step) copied them all: an LLM took many times its
    weights. The frozen graph holds each weight (1 MiB or more) in one Const."""
    from tftvm.graph.tfgraph.freeze import freeze

    w = tf.Variable(rng.standard_normal((512, 512)).astype(np.float32) * 0.04)  # sums of order 1

    def model(x):
        y = tf.matmul(x, w) + tf.reduce_sum(w, axis=0)
        _, y = tf.while_loop(lambda i, h: i < 2, lambda i, h: (i + 1, tf.tanh(tf.matmul(h, w))), [0, y])
        return y

    frozen = freeze(model, [tf.TensorSpec([None, 512])])
    sizes = [len(n.attr["value"].tensor.tensor_content) for n in frozen.graph_def.node if n.op == "Const"]
    assert sorted(sizes)[-1] == 512 * 512 * 4 and sorted(sizes)[-2] < 512 * 512 * 4, sorted(sizes)[-3:]
    compiled = tftvm.compile_model(model, [tf.TensorSpec([None, 512])], keep_faster=False)
    x = rng.standard_normal((3, 512)).astype(np.float32)
    np.testing.assert_allclose(compiled(x).numpy(), model(tf.constant(x)).numpy(), rtol=1e-4, atol=1e-5)
