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


def _anon_bytes() -> int:
    import ctypes
    import gc

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return int(status["RssAnon"].split()[0]) * 1024


def test_compiling_a_model_again_and_again_keeps_no_copy_of_its_weights(rng):
    """Each compile_model of a model with a 16 MiB weight kept 16 MiB for good: the weight in
    its packed layout, once in each loaded library (never unloaded), then in each mutator that
    lifted it out of the library (TVM keeps every PyExprMutator: a cycle through its FFI)."""
    w = tf.constant(rng.standard_normal((1024, 4096)).astype(np.float32))
    x = rng.standard_normal((2, 1024)).astype(np.float32)

    def compiled_once():
        compiled = tftvm.compile_model(lambda v: tf.matmul(v, w), [tf.TensorSpec([None, 1024])])
        np.testing.assert_allclose(compiled(x).numpy(), x @ w.numpy(), rtol=1e-4, atol=1e-3)

    compiled_once()  # the kernel compiled and cached, TF's functions traced
    before = _anon_bytes()
    for _ in range(6):
        compiled_once()
    grown = _anon_bytes() - before
    # a kept copy per compile is 6 weights more; what TF's allocator keeps of freed tensors is up to 2
    assert grown < 3 * w.numpy().nbytes, f"{grown / 2**20:.1f} MiB more after 6 compiles"


def test_a_model_compiled_again_maps_its_library_once(rng):
    """TVM never unloads a library it loaded, and a process holds at most vm.max_map_count
    (65530) mappings: the fuzzer's process aborted after some ten thousand compiled models,
    each loaded from a file of its own. Kept in the cache by content, a model's library is
    mapped once however often the model is compiled."""
    def mappings() -> int:
        return sum(1 for line in open("/proc/self/maps") if "/vm/" in line and line.rstrip().endswith(".so"))

    x = rng.standard_normal((2, 6)).astype(np.float32)
    before = mappings()
    for i in range(3):
        compiled = tftvm.compile_model(lambda v: tf.nn.relu(v) * 3.0 - 1.0, [tf.TensorSpec([None, 6])])
        np.testing.assert_allclose(compiled(x).numpy(), np.maximum(x, 0) * 3 - 1, rtol=1e-6, atol=1e-6)
        if i == 0:
            first = mappings() - before
    assert first > 0 and mappings() - before == first


def test_compile_model_copies_a_misaligned_input_instead_of_failing():
    """A TF tensor viewing NumPy memory 4 bytes past a 64-byte boundary: TVM refuses it
    through DLPack, and the fallback that copies it named an error type TVM does not have
    (AttributeError instead of the answer)."""
    compiled = tftvm.compile_model(lambda v: v * 2.0, [tf.TensorSpec([None])])
    base = np.arange(65, dtype=np.float32)
    view = base[1:]
    assert view.ctypes.data % 64 != 0
    t = tf.experimental.dlpack.from_dlpack(view.__dlpack__())
    np.testing.assert_array_equal(compiled(t).numpy(), view * 2)
