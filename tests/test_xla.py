"""tftvm ops inside XLA: `tf.function(jit_compile=True)` and Keras' `jit_compile=True` compile
TvmCall to a custom call (target "tftvm_call") whose handler runs the same TVM function on
XLA's buffers. Every test checks numbers against TF, and that the HLO has the custom call
(no silent fallback to the TF kernel)."""
import keras
import numpy as np
import pytest
import tensorflow as tf
import tftvm
from conftest import run_python
from tvm import te


def silu_op():
    n = te.var("n")
    x = te.placeholder((n, 8), "float32", name="x")
    y = te.compute((n, 8), lambda i, j: x[i, j] * te.sigmoid(x[i, j]), name="y")
    return tftvm.op([x], [y], name="silu", grad="auto")


@pytest.fixture(scope="module")
def silu():
    return silu_op()


def hlo(fn, *args) -> str:
    return fn.experimental_get_compiler_ir(*args)(stage="hlo")


def test_a_tftvm_op_compiles_under_jit_compile_to_a_custom_call(silu, rng):
    a = tf.constant(rng.standard_normal((5, 8)).astype(np.float32))
    fn = tf.function(lambda a: silu(a) * 2.0 + 1.0, jit_compile=True)
    np.testing.assert_allclose(fn(a), tf.nn.silu(a) * 2.0 + 1.0, rtol=1e-5, atol=1e-6)
    text = hlo(fn, a)
    assert 'custom_call_target="tftvm_call"' in text and "API_VERSION_TYPED_FFI" in text, text
    b = tf.constant(rng.standard_normal((3, 8)).astype(np.float32))  # another static shape: recompiles
    np.testing.assert_allclose(fn(b), tf.nn.silu(b) * 2.0 + 1.0, rtol=1e-5, atol=1e-6)


def test_gradients_under_jit_compile_match_tf(silu, rng):
    a = tf.constant(rng.standard_normal((4, 8)).astype(np.float32))

    def grad(f):
        def g(a):
            with tf.GradientTape() as tape:
                tape.watch(a)
                loss = tf.reduce_sum(f(a) ** 2)
            return tape.gradient(loss, a)

        return g

    jitted = tf.function(grad(silu), jit_compile=True)
    np.testing.assert_allclose(jitted(a), grad(tf.nn.silu)(a), rtol=1e-5, atol=1e-6)
    assert hlo(jitted, a).count('custom_call_target="tftvm_call"') == 2  # forward and backward


def test_several_outputs_and_a_scalar_that_sizes_them(rng):
    """A scalar argument that sets a dim (x: (n * 4,) -> (n, 4)) must be a compile-time
    constant under XLA, whose shapes are static; otherwise the error names the op."""
    from tvm import tirx

    n = tirx.Var("n", "int64")
    x = te.placeholder((n * 4,), "float32", name="x")
    rows = te.compute((n, 4), lambda i, j: x[i * 4 + j], name="rows")
    doubled = te.compute((n, 4), lambda i, j: x[i * 4 + j] * 2.0, name="doubled")
    split = tftvm.op(te.create_prim_func([n, x, rows, doubled]), num_outputs=2, name="split")
    data = tf.constant(rng.standard_normal(12).astype(np.float32))
    const = tf.function(lambda x: split(tf.constant(3, tf.int64), x), jit_compile=True)
    r, d = const(data)
    np.testing.assert_allclose(r, tf.reshape(data, [3, 4]))
    np.testing.assert_allclose(d, 2 * tf.reshape(data, [3, 4]))
    assert 'custom_call_target="tftvm_call"' in hlo(const, data)
    dynamic = tf.function(lambda k, x: split(k, x), jit_compile=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match="'split'.*compile-time constant"):
        dynamic(tf.constant(3, tf.int64), data)


def test_an_optimize_result_runs_inside_jit_compile(rng):
    w = tf.constant(rng.standard_normal((16, 8)).astype(np.float32))
    fn = tf.function(lambda x: tf.nn.relu(tf.matmul(x, w) + 1.0) * 2.0)
    fast = tftvm.optimize(fn, [tf.TensorSpec([None, 16], tf.float32)], keep_faster=False)
    x = tf.constant(rng.standard_normal((4, 16)).astype(np.float32))
    jitted = tf.function(lambda x: fast(x) + 0.5, jit_compile=True)
    np.testing.assert_allclose(jitted(x), fn(x) + 0.5, rtol=1e-5, atol=1e-5)
    assert 'custom_call_target="tftvm_call"' in hlo(jitted, x)


class TvmSilu(keras.layers.Layer):
    def __init__(self, op, **kwargs):
        super().__init__(**kwargs)
        self.op = op

    def call(self, x):
        return self.op(x)


def test_a_keras_model_with_a_tftvm_layer_trains_under_jit_compile_as_without(silu, rng):
    """The issue's bar: each step's loss with jit_compile=True matches the model without
    XLA to 1e-4."""
    x = rng.standard_normal((64, 16)).astype(np.float32)
    y = rng.standard_normal((64, 1)).astype(np.float32)

    def losses(jit):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8), TvmSilu(silu), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", jit_compile=jit)
        return [float(model.train_on_batch(x[i : i + 16], y[i : i + 16])) for i in range(0, 64, 16) for _ in range(2)]

    np.testing.assert_allclose(losses(True), losses(False), rtol=1e-4)


AUTO_CLUSTERING = """
import numpy as np, tensorflow as tf, tftvm
from tvm import te
tf.config.optimizer.set_jit(True)
n = te.var("n")
x = te.placeholder((n, 8), "float32", name="x")
silu = tftvm.op([x], [te.compute((n, 8), lambda i, j: x[i, j] * te.sigmoid(x[i, j]), name="y")], name="silu")
a = tf.constant(np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32))
f = tf.function(lambda a: tf.matmul(silu(a * 2.0) + 1.0, tf.ones((8, 8))))
want = tf.matmul(tf.nn.silu(a * 2.0) + 1.0, tf.ones((8, 8)))
print("max error", float(tf.reduce_max(tf.abs(f(a) - want))))
"""


def test_xla_auto_clustering_takes_tvmcall_into_its_cluster():
    """tf.config.optimizer.set_jit(True) (on CPU with --tf_xla_cpu_global_jit): TF's clustering
    pass puts TvmCall into an XLA cluster with the TF ops around it."""
    proc = run_python(AUTO_CLUSTERING, env={"TF_XLA_FLAGS": "--tf_xla_cpu_global_jit", "TF_CPP_MIN_LOG_LEVEL": "0",
                                            "TF_CPP_VMODULE": "mark_for_compilation_pass=3"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Assigning node TvmCall to cluster" in proc.stderr, proc.stderr[-3000:]
    error = float(proc.stdout.split("max error")[-1])
    assert error < 1e-5, proc.stdout


LATE = """
import numpy as np, tensorflow as tf
a = tf.constant(np.arange(16, dtype=np.float32).reshape(2, 8))  # TF's devices exist before tftvm loads
import tftvm
from tvm import te
x = te.placeholder((2, 8), "float32", name="x")
plus = tftvm.op([x], [te.compute((2, 8), lambda i, j: x[i, j] + 1.0, name="y")], name="plus_one")
f = tf.function(lambda a: plus(a) * 2.0, jit_compile=True)
print("ok", np.allclose(f(a).numpy(), (a.numpy() + 1) * 2), 'tftvm_call' in f.experimental_get_compiler_ir(a)(stage="hlo"))
"""


def test_jit_compile_works_when_tf_started_before_the_bridge_loaded():
    """XLA registers its compilation kernels once, when TF creates its devices: a bridge loaded
    later registers TvmCall's XLA kernel itself."""
    proc = run_python(LATE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ok True True" in proc.stdout, proc.stdout + proc.stderr[-2000:]


def test_an_op_loaded_from_a_saved_model_runs_inside_jit_compile(silu, rng, tmp_path):
    module = tf.Module()
    module.f = tf.function(lambda x: silu(x) + 1.0, input_signature=[tf.TensorSpec([None, 8], tf.float32)])
    tf.saved_model.save(module, str(tmp_path))
    loaded = tf.saved_model.load(str(tmp_path))
    a = tf.constant(rng.standard_normal((3, 8)).astype(np.float32))
    jitted = tf.function(lambda x: loaded.f(x) * 2.0, jit_compile=True)
    np.testing.assert_allclose(jitted(a), (tf.nn.silu(a) + 1.0) * 2.0, rtol=1e-5, atol=1e-6)
    assert 'custom_call_target="tftvm_call"' in hlo(jitted, a)


def test_tftvm_check_of_the_op_covers_jit_compile(silu, rng):
    report = tftvm.check(silu, rng.standard_normal((3, 8)).astype(np.float32))
    assert report.passed and any(r.check == "jit_compile" and r.passed for r in report.results), report
