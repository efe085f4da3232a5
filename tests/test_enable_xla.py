"""enable() and `tf.function(jit_compile=True)`: XLA compiles such a function without TF's graph
passes, so enable() turns TF's jit_compile_rewrite on and its pass gives XLA back what it should
compile. "replace": TVM's clusters and the TF ops around them run in TF's executor; "inside":
XLA compiles the rewritten function, TVM's clusters as custom calls; "xla": left to XLA."""
import numpy as np
import pytest
import tensorflow as tf
import tftvm
import tvm_ffi
from tensorflow.python.eager import context
from tftvm import enable_pass, native

OPTIONS = dict(keep_faster=False)  # the safety net would keep these small graphs in TF


@pytest.fixture(autouse=True)
def pass_disabled_after():
    yield
    tftvm.disable()


def runs(under_xla: bool) -> int:
    """TvmCall runs so far, by TF's kernel or as XLA's custom call."""
    native.load()
    return tvm_ffi.get_global_func("tftvm.tvm_calls_run")(under_xla)


def dense(w, b):
    @tf.function(jit_compile=True)
    def step(x):
        return tf.reduce_sum(tf.nn.relu(tf.matmul(x, w) + b) * 2.0, axis=1)

    return step


@pytest.mark.parametrize("mode", ["replace", "inside"])
def test_a_jit_compile_function_runs_its_compute_in_tvm_and_matches_xla(mode, rng):
    w = tf.Variable(rng.standard_normal((64, 32)).astype(np.float32))
    b = tf.Variable(rng.standard_normal(32).astype(np.float32))
    x = tf.constant(rng.standard_normal((8, 64)).astype(np.float32))
    want = dense(w, b)(x).numpy()
    before = runs(under_xla=mode == "inside")
    with tftvm.enabled(jit_compile=mode, **OPTIONS):
        step = dense(w, b)
        got = step(x).numpy()
        b.assign(b - 1.0)  # still a variable, read by the compiled function
        shifted = step(x).numpy()
    assert runs(under_xla=mode == "inside") >= before + 2
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(shifted, np.maximum(x.numpy() @ w.numpy() + b.numpy(), 0).sum(1) * 2.0,
                               rtol=1e-5, atol=1e-4)  # fmt: skip
    assert "offloaded to TVM: 5" in tftvm.enabled_report(), tftvm.enabled_report()


@pytest.mark.parametrize("mode", ["replace", "inside"])
def test_what_tvm_does_not_take_stays_xlas(mode):
    """XLA clamps an out-of-range gather index where TF's kernel raises: a jit_compile function
    with nothing for TVM still behaves as XLA's."""
    params = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    index = tf.constant([0, 7])
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.function(lambda p, i: tf.gather(p, i))(params, index)
    with tftvm.enabled(jit_compile=mode, **OPTIONS):
        got = tf.function(lambda p, i: tf.gather(p, i), jit_compile=True)(params, index).numpy()
    np.testing.assert_array_equal(got, [[1.0, 2.0], [5.0, 6.0]])


@pytest.mark.parametrize("mode", ["replace", "inside"])
def test_a_jit_compile_functions_variable_updates_run_once_per_call(mode, rng):
    """An assignment is a control output of the function: it runs, once, in every mode."""
    w = tf.constant(rng.standard_normal((16, 8)).astype(np.float32))
    count = tf.Variable(0.0)

    @tf.function(jit_compile=True)
    def step(x):
        count.assign_add(1.0)
        return tf.nn.relu(tf.matmul(x, w) + 1.0) * 2.0

    x = tf.constant(rng.standard_normal((4, 16)).astype(np.float32))
    with tftvm.enabled(jit_compile=mode, **OPTIONS):
        for _ in range(3):
            got = step(x).numpy()
    assert count.numpy() == 3.0
    np.testing.assert_allclose(got, np.maximum(x.numpy() @ w.numpy() + 1.0, 0) * 2.0, rtol=1e-5, atol=1e-5)


def test_jit_compile_xla_leaves_jit_functions_to_xla(rng):
    w = tf.constant(rng.standard_normal((16, 8)).astype(np.float32))
    b = tf.constant(rng.standard_normal(8).astype(np.float32))
    x = tf.constant(rng.standard_normal((4, 16)).astype(np.float32))
    before = len(enable_pass.rewrites()), runs(False), runs(True)
    with tftvm.enabled(jit_compile="xla", **OPTIONS):
        got = dense(w, b)(x).numpy()
    assert (len(enable_pass.rewrites()), runs(False), runs(True)) == before
    np.testing.assert_allclose(got, np.maximum(x.numpy() @ w.numpy() + b.numpy(), 0).sum(1) * 2.0, rtol=1e-5, atol=1e-4)


def test_enable_sets_tfs_jit_compile_rewrite_and_disable_restores_it():
    assert not context.jit_compile_rewrite_enabled()
    with tftvm.enabled(**OPTIONS):
        assert context.jit_compile_rewrite_enabled()
        with tftvm.enabled(jit_compile="xla"):
            assert not context.jit_compile_rewrite_enabled()
        assert context.jit_compile_rewrite_enabled()
    assert not context.jit_compile_rewrite_enabled()


def test_an_unknown_jit_compile_mode_is_refused_by_name():
    with pytest.raises(ValueError, match="jit_compile"):
        tftvm.enable(jit_compile="yes")
    assert not tftvm.is_enabled()
