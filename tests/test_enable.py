"""tftvm.enable(): TF's own graph optimization pass sends every graph TF runs through tftvm.

Each test builds fresh tf.functions and Keras models: TF runs the pass once per function
instantiation, so a function called before would keep its first graph."""
import threading

import keras
import numpy as np
import pytest
import tensorflow as tf
import tftvm
from conftest import run_python

# keep_faster=False: the safety net would keep these small graphs in TF, where they are as fast.
OPTIONS = dict(keep_faster=False)


@pytest.fixture(autouse=True)
def pass_disabled_after():
    yield
    tftvm.disable()


def dense_step(w, b):
    @tf.function
    def step(x):
        return tf.nn.relu(tf.matmul(x, w) + b) * 2.0

    return step


def test_a_tf_function_runs_its_compute_in_tvm_and_matches_tf(rng):
    w = tf.Variable(rng.standard_normal((64, 32)).astype(np.float32))
    b = tf.Variable(rng.standard_normal(32).astype(np.float32))
    x = tf.constant(rng.standard_normal((8, 64)).astype(np.float32))
    want = dense_step(w, b)(x).numpy()
    with tftvm.enabled(**OPTIONS):
        got = dense_step(w, b)(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert "offloaded to TVM: 4" in tftvm.enabled_report()


PLACEMENT = """
import sys, numpy as np, tensorflow as tf, tftvm
tf.debugging.set_log_device_placement(True)  # TF's placer logs every node the runtime runs
w = tf.Variable(np.ones((16, 8), np.float32))
def step():
    return tf.function(lambda x: tf.nn.relu(tf.matmul(x, w) + 1.0) * 2.0)
tftvm.enable(keep_faster=False)
assert np.allclose(step()(tf.ones((4, 16))).numpy(), 34.0)
sys.stderr.write("--- disabled\\n"); sys.stderr.flush()
tftvm.disable()
assert np.allclose(step()(tf.ones((4, 16))).numpy(), 34.0)
"""


def test_the_runtime_runs_tvmcall_while_enabled_and_matmul_after_disable():
    done = run_python(PLACEMENT, env={"TF_CPP_MIN_LOG_LEVEL": "0"})
    assert done.returncode == 0, done.stderr[-3000:]
    enabled, disabled = done.stderr.split("--- disabled")
    assert "(TvmCall)" in enabled and "(MatMul)" not in enabled, enabled[-3000:]
    assert "(MatMul)" in disabled and "(TvmCall)" not in disabled, disabled[-3000:]


def test_variables_stay_variables(rng):
    """The pass reads variables where they are: an assignment after the first call shows."""
    w = tf.Variable(rng.standard_normal((16, 8)).astype(np.float32))
    b = tf.Variable(np.zeros(8, np.float32))
    x = tf.constant(rng.standard_normal((4, 16)).astype(np.float32))
    with tftvm.enabled(**OPTIONS):
        step = dense_step(w, b)
        first = step(x).numpy()
        w.assign(w * -1.0)
        second = step(x).numpy()
    np.testing.assert_allclose(first, np.maximum(x.numpy() @ (-w.numpy()), 0) * 2.0, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(second, np.maximum(x.numpy() @ w.numpy(), 0) * 2.0, rtol=1e-5, atol=1e-5)


def mlp():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                             keras.layers.Dense(16, activation="gelu"), keras.layers.Dense(4)])  # fmt: skip


def test_keras_predict_matches_without_the_pass(rng):
    x = rng.standard_normal((64, 32)).astype(np.float32)
    want = mlp().predict(x, verbose=0)
    with tftvm.enabled(**OPTIONS):
        got = mlp().predict(x, verbose=0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert "one_step_on_data" in tftvm.enabled_report()


def test_keras_fit_trains_to_the_same_loss(rng):
    """A training step: the forward and backward matmuls go to TVM, the optimizer's updates
    (AssignSubVariableOp) stay in TF, and the losses are TF's."""
    x = rng.standard_normal((64, 32)).astype(np.float32)
    y = rng.standard_normal((64, 4)).astype(np.float32)

    def losses():
        model = mlp()
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
        return model.fit(x, y, batch_size=16, epochs=3, verbose=0, shuffle=False).history["loss"]

    want = losses()
    with tftvm.enabled(**OPTIONS):
        got = losses()
    np.testing.assert_allclose(got, want, rtol=1e-5)
    report = tftvm.enabled_report()
    assert "multi_step_on_iterator" in report and "AssignSubVariableOp" in report, report


def test_a_failure_in_the_pass_leaves_the_graph_to_tf(rng):
    w = tf.Variable(rng.standard_normal((16, 8)).astype(np.float32))
    b = tf.Variable(rng.standard_normal(8).astype(np.float32))
    x = tf.constant(rng.standard_normal((4, 16)).astype(np.float32))
    with tftvm.enabled(target={"kind": "no-such-target"}, **OPTIONS):
        got = dense_step(w, b)(x).numpy()
    np.testing.assert_allclose(got, np.maximum(x.numpy() @ w.numpy() + b.numpy(), 0) * 2.0, rtol=1e-5, atol=1e-5)
    assert "no-such-target" in tftvm.enabled_report()


def test_disable_and_the_context_manager_restore_the_state():
    assert not tftvm.is_enabled()
    with tftvm.enabled(**OPTIONS):
        assert tftvm.is_enabled()
        with tftvm.enabled(min_cluster_size=1):
            assert tftvm.is_enabled()
        assert tftvm.is_enabled()
    assert not tftvm.is_enabled()
    tftvm.enable(**OPTIONS)
    tftvm.disable()
    assert not tftvm.is_enabled()


def test_threads_calling_functions_at_once_neither_hang_nor_mix_results(rng):
    """Four Python threads instantiate four functions at once (TF's inter-op threads run
    them): each is rewritten or left to TF, none waits on another's pass."""
    weights = [tf.Variable(rng.standard_normal((32, 16)).astype(np.float32)) for _ in range(4)]
    bias = tf.Variable(np.zeros(16, np.float32))
    x = tf.constant(rng.standard_normal((8, 32)).astype(np.float32))
    results, errors = {}, []

    def call(i):
        try:
            results[i] = dense_step(weights[i], bias)(x).numpy()
        except Exception as err:  # noqa: BLE001  reported below
            errors.append(err)

    with tftvm.enabled(**OPTIONS):
        threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=240)
        assert not any(t.is_alive() for t in threads), "a thread hangs"
    assert not errors, errors
    for i, w in enumerate(weights):
        np.testing.assert_allclose(results[i], np.maximum(x.numpy() @ w.numpy(), 0) * 2.0, rtol=1e-5, atol=1e-5)


def test_tftvm_enable_environment_variable_turns_the_pass_on_for_an_unchanged_script():
    script = (
        "import numpy as np, tensorflow as tf, tftvm\n"
        "w = tf.Variable(np.ones((16, 8), np.float32))\n"
        "f = tf.function(lambda x: tf.nn.relu(tf.matmul(x, w) + 1.0) * 2.0)\n"
        "out = f(tf.ones((4, 16))).numpy()\n"
        "assert np.allclose(out, 34.0), out\n"
        "print(tftvm.is_enabled()); print(tftvm.enabled_report())\n"
    )
    done = run_python(script, env={"TFTVM_ENABLE": "1", "TFTVM_KEEP_FASTER": "0"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "True" in done.stdout and "offloaded to TVM: 4" in done.stdout, done.stdout


class Dense(tf.Module):
    def __init__(self, w, b):
        self.w, self.b = tf.Variable(w), tf.Variable(b)

    @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.float32)])
    def __call__(self, x):
        return tf.nn.relu(tf.matmul(x, self.w) + self.b) * 2.0


def test_a_loaded_saved_models_signature_goes_through_the_pass_with_a_none_batch(tmp_path, rng):
    w = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    tf.saved_model.save(Dense(w, b), str(tmp_path / "dense"))
    with tftvm.enabled(**OPTIONS):
        loaded = tf.saved_model.load(str(tmp_path / "dense"))
        for batch in (3, 5):  # one graph, its batch symbolic
            x = rng.standard_normal((batch, 16)).astype(np.float32)
            np.testing.assert_allclose(loaded(x).numpy(), np.maximum(x @ w + b, 0) * 2.0, rtol=1e-5, atol=1e-5)
    report = tftvm.enabled_report()
    assert "restored_function_body" in report and "inputs (None, 16)" in report, report
