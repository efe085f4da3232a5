"""tftvm.enable(): TF's own graph optimization pass sends every graph TF runs through tftvm.

TF runs the pass once per function instantiation (enable() and disable() make TF instantiate
again); each test builds fresh tf.functions and Keras models all the same, to stand alone."""
import threading

import keras
import numpy as np
import pytest
import tensorflow as tf
import tftvm
from tftvm import enable_pass
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
step = tf.function(lambda x: tf.nn.relu(tf.matmul(x, w) + 1.0) * 2.0)
assert np.allclose(step(tf.ones((4, 16))).numpy(), 34.0)  # instantiated before enable()
switch = {"enabled": lambda: tftvm.enable(keep_faster=False), "kept": lambda: tftvm.disable(keep_rewritten=True),
          "disabled": tftvm.disable}
for phase in ("enabled", "kept", "disabled"):
    sys.stderr.write(f"--- {phase}\\n"); sys.stderr.flush()
    switch[phase]()
    assert np.allclose(step(tf.ones((4, 16))).numpy(), 34.0)
"""


def test_the_runtime_runs_tvmcall_while_enabled_and_matmul_before_and_after():
    """The same function, called before enable(), while enabled, after
    disable(keep_rewritten=True) and after disable(): TF instantiates it again when the pass
    comes on and when it goes off (not when rewritten graphs are kept)."""
    done = run_python(PLACEMENT, env={"TF_CPP_MIN_LOG_LEVEL": "0"})
    assert done.returncode == 0, done.stderr[-3000:]
    before, rest = done.stderr.split("--- enabled")
    enabled, rest = rest.split("--- kept")
    kept, disabled = rest.split("--- disabled")
    assert "(MatMul)" in before and "(TvmCall)" not in before, before[-3000:]
    assert "(TvmCall)" in enabled and "(MatMul)" not in enabled, enabled[-3000:]
    # Not placed again: the function runs the graph instantiated while enabled.
    assert "Executing op __inference" in kept and "(TvmCall)" not in kept and "(MatMul)" not in kept, kept[-3000:]
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


def fit_losses_without_and_with_the_pass(build, x, y, epochs: int):
    """Keras fit's loss per epoch for a fresh `build()` model as TF trains it, and under enable()."""

    def losses():
        model = build()
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
        return model.fit(x, y, batch_size=16, epochs=epochs, verbose=0, shuffle=False).history["loss"]

    want = losses()
    with tftvm.enabled(**OPTIONS):
        return want, losses()


def test_keras_predict_matches_without_the_pass(rng):
    x = rng.standard_normal((64, 32)).astype(np.float32)
    want = mlp().predict(x, verbose=0)
    with tftvm.enabled(**OPTIONS):
        got = mlp().predict(x, verbose=0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert "one_step_on_data" in tftvm.enabled_report()


def test_keras_evaluate_gives_the_same_loss_and_metrics_with_its_compute_in_tvm(rng):
    """evaluate's step updates its metrics' variables (AssignAddVariableOp: they stay in TF)
    while the model's forward pass and the loss run in TVM."""
    x = rng.standard_normal((64, 32)).astype(np.float32)
    y = rng.standard_normal((64, 4)).astype(np.float32)

    def evaluate():
        model = mlp()
        model.compile(loss="mse", metrics=["mae"])
        return model.evaluate(x, y, batch_size=16, verbose=0, return_dict=True)

    want = evaluate()
    before = len(enable_pass.rewrites())
    with tftvm.enabled(**OPTIONS):
        got = evaluate()
    assert sorted(got) == sorted(want) == ["loss", "mae"]
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5)
    (step,) = [r for r in enable_pass.rewrites()[before:] if "multi_step_on_iterator" in r.function]
    assert step.offloaded > 0 and "MatMul x3" in step.report, step.report
    assert "stayed in TF: AssignVariableOp" in step.report and "stayed in TF: MatMul" not in step.report


def test_keras_fit_trains_to_the_same_loss(rng):
    """A training step: the forward and backward matmuls go to TVM, the optimizer's updates
    (AssignSubVariableOp) stay in TF, and the losses are TF's."""
    x = rng.standard_normal((64, 32)).astype(np.float32)
    y = rng.standard_normal((64, 4)).astype(np.float32)
    want, got = fit_losses_without_and_with_the_pass(mlp, x, y, epochs=3)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    report = tftvm.enabled_report()
    assert "multi_step_on_iterator" in report and "AssignSubVariableOp" in report, report


def test_keras_fit_of_an_lstm_trains_to_the_same_loss_with_both_loops_in_tvm(rng):
    """The LSTM's forward loop body and its gradient loop body (which pops what the forward
    loop kept in TensorLists) run their cell math as TvmCall nodes; the losses are TF's."""
    x = rng.integers(0, 50, (32, 6)).astype(np.int32)
    y = rng.standard_normal((32, 4)).astype(np.float32)

    def lstm():
        keras.utils.set_random_seed(3)
        tokens = keras.Input((6,), dtype="int32")
        hidden = keras.layers.LSTM(12)(keras.layers.Embedding(50, 8)(tokens))
        return keras.Model(tokens, keras.layers.Dense(4)(hidden))

    want, got = fit_losses_without_and_with_the_pass(lstm, x, y, epochs=2)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    step = [r for r in enable_pass.rewrites() if "multi_step_on_iterator" in r.function][-1]
    assert step.error is None and step.offloaded >= 0.4 * step.compute_nodes, step.report
    # The optimizer's updates stay in TF; the loops' cell math would be listed as "inside
    # (Stateless)While ..., which runs in TF".
    assert "stayed in TF: AssignSubVariableOp" in step.report
    for op in ("SigmoidGrad", "TanhGrad", "Sigmoid", "MatMul x"):
        assert f"stayed in TF: {op}" not in step.report, step.report


def test_in_a_training_step_loop_bodies_need_a_clear_win_to_leave_tf(rng, monkeypatch):
    """With the safety net on, a clock saying TVM is 1.2x as fast as TF keeps TVM in the
    training step's main graph (which asks 1.1x) and in an inference loop, but not in a
    training step's loop bodies (1.25x), where TVM costs more per iteration than the body's
    own timing shows."""
    from tftvm.graph.offload import safety_net

    monkeypatch.setattr(safety_net, "time_both", lambda *args: safety_net.Timing(1.0e-3, 1.2e-3))
    monkeypatch.setattr(safety_net, "_read", lambda key: [])
    x = rng.integers(0, 50, (16, 6)).astype(np.int32)
    y = rng.standard_normal((16, 4)).astype(np.float32)
    keras.utils.set_random_seed(5)
    tokens = keras.Input((6,), dtype="int32")
    model = keras.Model(tokens, keras.layers.Dense(4)(keras.layers.LSTM(12)(keras.layers.Embedding(50, 8)(tokens))))
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    before = len(enable_pass.rewrites())
    with tftvm.enabled(keep_faster=True):
        model.fit(x, y, batch_size=16, epochs=1, verbose=0)
        model.predict(x, batch_size=16, verbose=0)
    train, predict = [r for r in enable_pass.rewrites()[before:] if r.offloaded]
    bodies = [line for line in train.report.splitlines() if line.startswith("body of")]
    assert len(bodies) == 2 and all("stays in TF (TVM is not 1.25x as fast as TF, as a training step asks" in b
                                    for b in bodies), train.report  # fmt: skip
    (body,) = [line for line in predict.report.splitlines() if line.startswith("body of")]
    assert body.endswith("compute nodes in TVM") and "stayed in TF: Sigmoid" not in predict.report, predict.report


def test_a_training_step_keeps_tvm_only_where_it_clearly_wins(rng, monkeypatch):
    """A training step's main graph runs in TVM where its cluster times 1.1x as fast as TF's,
    not at a near tie (1.05x), which an inference graph keeps in TVM: timed alone, a step's
    cluster flatters TVM (see safety_net.TRAINING_STEP_MARGIN)."""
    from tftvm.graph.offload import safety_net

    monkeypatch.setattr(safety_net, "_read", lambda key: [])
    x = rng.standard_normal((16, 8)).astype(np.float32)
    y = rng.standard_normal((16, 4)).astype(np.float32)
    for tf_ms, trains_in_tvm in ((1.05, False), (1.15, True)):
        monkeypatch.setattr(safety_net, "time_both", lambda *args, t=tf_ms: safety_net.Timing(1.0e-3, t * 1e-3))
        keras.utils.set_random_seed(5)
        inp = keras.Input((8,))
        model = keras.Model(inp, keras.layers.Dense(4)(keras.layers.Dense(16, activation="tanh")(inp)))
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
        before = len(enable_pass.rewrites())
        with tftvm.enabled(keep_faster=True):
            model.fit(x, y, batch_size=16, epochs=1, verbose=0)
            model.predict(x, batch_size=16, verbose=0)
        # Keras 3: fit's step runs inside multi_step_on_iterator, predict's is one_step_on_data_distributed.
        train = [r for r in enable_pass.rewrites()[before:] if "multi_step_on_iterator" in r.function]
        predict = [r for r in enable_pass.rewrites()[before:] if "one_step_on_data_distributed" in r.function]
        assert train and predict, [r.function for r in enable_pass.rewrites()[before:]]
        assert (train[-1].offloaded > 0) == trains_in_tvm, train[-1].report
        assert predict[-1].offloaded > 0, predict[-1].report  # inference keeps the near tie in TVM


def test_a_new_shape_compiles_symbolic_kernels_once_and_the_cache_serves_repeats(rng):
    """TF's own retracing rule (reduce_retracing, as Keras uses) decides when the pass runs: a
    second batch size traces the function with a None batch, which the pass compiles as
    symbolic kernels; a third size reuses that graph. The same graph instantiated again
    finds its kernels in the cache."""
    w = tf.Variable(rng.standard_normal((24, 16)).astype(np.float32))
    b = tf.Variable(rng.standard_normal(16).astype(np.float32))

    def step():
        return tf.function(lambda x: tf.nn.relu(tf.matmul(x, w) + b) * 2.0, reduce_retracing=True)

    def want(x):
        return np.maximum(x @ w.numpy() + b.numpy(), 0) * 2.0

    fn, before = step(), len(enable_pass.rewrites())
    with tftvm.enabled(**OPTIONS):
        for batch in (2, 3, 5):
            x = rng.standard_normal((batch, 24)).astype(np.float32)
            np.testing.assert_allclose(fn(x).numpy(), want(x), rtol=1e-5, atol=1e-5)
        static, symbolic = enable_pass.rewrites()[before:]
        assert "inputs (2, 24)" in static.report and "inputs (None, 24)" in symbolic.report, symbolic.report
        again = step()
        again(rng.standard_normal((2, 24)).astype(np.float32))
    repeat = enable_pass.rewrites()[-1]
    assert repeat.compiled == 0 and repeat.cached >= 1, tftvm.enabled_report()
    assert "from the cache" in tftvm.enabled_report()


def test_a_function_instantiated_again_is_one_report_entry_with_summed_counts(rng):
    """enable() with new options makes TF instantiate the same function again: the report keeps
    one entry for it (its latest report), counting both instantiations' kernels."""
    w = tf.Variable(rng.standard_normal((16, 8)).astype(np.float32))
    b = tf.Variable(rng.standard_normal(8).astype(np.float32))
    x = tf.constant(rng.standard_normal((4, 16)).astype(np.float32))
    step = dense_step(w, b)
    before = len(enable_pass.rewrites())
    tftvm.enable(**OPTIONS)
    step(x)
    tftvm.enable(min_cluster_size=2, **OPTIONS)  # new options: TF instantiates `step` again
    np.testing.assert_allclose(step(x), np.maximum(x.numpy() @ w.numpy() + b.numpy(), 0) * 2.0, rtol=1e-5, atol=1e-5)
    first, second = enable_pass.rewrites()[before:]
    assert first.function == second.function
    report = tftvm.enabled_report()
    entry = [part for part in report.split("\n\n") if part.startswith(first.function + ":")]
    assert len(entry) == 1 and "instantiated 2 times" in entry[0], report
    kernels = first.compiled + first.cached + second.compiled + second.cached
    assert f"({first.compiled + second.compiled} kernels compiled, {first.cached + second.cached} from the cache)" in entry[0]
    assert kernels >= 2


def test_a_failure_in_the_pass_leaves_the_graph_to_tf(rng):
    w = tf.Variable(rng.standard_normal((16, 8)).astype(np.float32))
    b = tf.Variable(rng.standard_normal(8).astype(np.float32))
    x = tf.constant(rng.standard_normal((4, 16)).astype(np.float32))
    with tftvm.enabled(target={"kind": "no-such-target"}, **OPTIONS):
        got = dense_step(w, b)(x).numpy()
    np.testing.assert_allclose(got, np.maximum(x.numpy() @ w.numpy() + b.numpy(), 0) * 2.0, rtol=1e-5, atol=1e-5)
    report = tftvm.enabled_report()
    assert "no-such-target" in report and "__inference_step" in report, report  # named, not "graph"


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


@pytest.mark.parametrize("inter_op", [1, 3])
def test_keras_predict_on_threads_with_few_inter_op_threads_and_the_safety_net_on(inter_op):
    """The pass runs on one of TF's threads and, with the safety net on, itself runs TF
    functions to time clusters against TF; with a single inter-op thread (or a few) and three
    Python threads predicting at once, nothing waits forever and every result is Keras'."""
    script = f"""
import threading, numpy as np, tensorflow as tf
tf.config.threading.set_inter_op_parallelism_threads({inter_op})
tf.config.threading.set_intra_op_parallelism_threads(2)
import keras, tftvm
x = np.random.default_rng(0).standard_normal((6, 32)).astype(np.float32)
models = []
for seed in range(3):
    keras.utils.set_random_seed(seed)
    models.append(keras.Sequential([keras.Input((32,)), keras.layers.Dense(24, activation="gelu"),
                                    keras.layers.Dense(8)]))
want = [m(x).numpy() for m in models]
got, errors = {{}}, []
def run(i):
    try:
        got[i] = models[i].predict(x, batch_size=4, verbose=0)
    except Exception as err:
        errors.append(repr(err))
tftvm.enable(keep_faster=True)
threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
for t in threads: t.start()
for t in threads: t.join(timeout=200)
assert not any(t.is_alive() for t in threads), "a thread hangs"
assert not errors, errors
for i in range(3):
    np.testing.assert_allclose(got[i], want[i], rtol=1e-5, atol=1e-5)
print("rewritten", sum(1 for r in tftvm.enable_pass.rewrites() if r.offloaded and r.error is None))
"""
    done = run_python(script, env={"TFTVM_KEEP_FASTER": None}, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split("rewritten")[-1]) >= 1, done.stdout


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
