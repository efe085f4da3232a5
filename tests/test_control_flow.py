"""Control flow in `tftvm.optimize`: While/If stay TF nodes, their bodies' compute runs in TVM."""
import keras
import numpy as np
import pytest
import tensorflow as tf
import tftvm

from conftest import run_python

L = keras.layers
SIG = [tf.TensorSpec([None, 5, 4])]


def _model(*layers_):
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((5, 4)), *layers_])


def _functions(fast) -> dict:
    """The library of the traced optimized function: name -> FunctionDef."""
    graph = fast.__call__.get_concrete_function().graph
    return {f.signature.name: f for f in graph.as_graph_def().library.function}


def _tvm_ops_in_bodies(fast) -> int:
    """TvmCall nodes in the functions the optimized graph's While/If nodes call."""
    return sum(1 for f in _functions(fast).values() for n in f.node_def if n.op == "TvmCall")


def _check(fn, fast, rng):
    for batch in (1, 3):
        x = rng.standard_normal((batch, 5, 4)).astype(np.float32)
        want, got = tf.nest.flatten(fn(x)), tf.nest.flatten(fast(x))
        assert len(want) == len(got)
        for w, g in zip(want, got):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("layer", [
    lambda: L.LSTM(8),
    lambda: L.GRU(8),
    lambda: L.Bidirectional(L.LSTM(8)),
    lambda: L.LSTM(8, return_sequences=True),
], ids=["lstm", "gru", "bidirectional_lstm", "return_sequences"])  # fmt: skip
def test_keras_rnn_step_runs_in_tvm(layer, rng):
    model = _model(layer())
    fast = tftvm.optimize(model, SIG)
    _check(model, fast, rng)
    loops = [b for b in fast.bodies if b.attr == "body"]
    assert loops and all(b.replacement is not None and b.offloaded > 0 for b in loops), fast.bodies
    assert _tvm_ops_in_bodies(fast) >= len(loops)
    replaced = {b.replacement for b in loops}
    assert replaced <= set(_functions(fast))  # the loops call the new bodies
    assert not {b.function for b in loops} & set(_functions(fast))  # and not the old ones


def test_lstm_step_ops_go_to_tvm(rng):
    fast = tftvm.optimize(_model(L.LSTM(8)), SIG)
    (body,) = fast.bodies
    offloaded = {n.op for c in body.clusters if c.program is not None for n in c.nodes}
    # x.W + h.U too: the step input and the state have their own None batch dims.
    assert {"MatMul", "AddV2", "BiasAdd", "Split", "Sigmoid", "Tanh"} <= offloaded, offloaded
    body_kernels = {id(k) for c in body.clusters if c.program is not None for k in c.program.kernels}
    assert body_kernels and body_kernels <= {id(k) for k in fast.kernels()}  # what tune tunes


def test_simple_rnn(rng):
    # Its step is tanh(x @ W + b + h @ U): x and h come with batch dims of their own, which
    # today's converter cannot prove equal, so the add between them stays in TF and only
    # small clusters remain (min_cluster_size=1 lets them go to TVM).
    model = _model(L.SimpleRNN(8))
    _check(model, tftvm.optimize(model, SIG), rng)
    fast = tftvm.optimize(model, SIG, min_cluster_size=1)
    _check(model, fast, rng)
    assert _tvm_ops_in_bodies(fast) > 0


def test_return_state_gives_every_output(rng):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((5, 4))
    model = keras.Model(inputs, L.LSTM(8, return_state=True)(inputs))
    fast = tftvm.optimize(model, SIG)
    _check(model, fast, rng)
    assert len(tf.nest.flatten(fast(np.zeros((2, 5, 4), np.float32)))) == 3
    assert _tvm_ops_in_bodies(fast) > 0


def test_cond_branches_run_in_tvm(rng):
    def model(x):
        return tf.cond(tf.reduce_sum(x) > 0.0,
                       lambda: tf.tanh(x * 2.0 + 1.0) * 3.0,
                       lambda: tf.sigmoid(x - 1.0) * 0.5 + x)  # fmt: skip

    fast = tftvm.optimize(model, SIG)
    for sign in (1.0, -1.0):  # both branches
        for batch in (1, 3):
            x = sign * np.abs(rng.standard_normal((batch, 5, 4))).astype(np.float32)
            np.testing.assert_allclose(fast(x).numpy(), model(x).numpy(), rtol=1e-4, atol=1e-4)
    branches = {b.attr: b for b in fast.bodies}
    assert set(branches) == {"then_branch", "else_branch"}
    assert all(b.replacement is not None for b in branches.values())
    assert _tvm_ops_in_bodies(fast) >= 2


def _hand_written_loop(x, nested=False):
    w = tf.constant(np.linspace(-0.5, 0.5, 16, dtype=np.float32).reshape(4, 4))

    def step(i, h):
        if nested:  # a cond inside the loop body: a body of a body
            h = tf.cond(i % 2 == 0, lambda: tf.sigmoid(tf.matmul(h, w)) * 1.1 + h, lambda: h * 0.5 - 0.1)
        return i + 1, tf.tanh(tf.matmul(h, w) + 0.5) * 0.9

    _, h = tf.while_loop(lambda i, h: i < 3, step, [tf.constant(0), tf.reduce_sum(x, axis=1)])
    return h


def test_hand_written_while_loop(rng):
    fast = tftvm.optimize(_hand_written_loop, SIG)
    _check(_hand_written_loop, fast, rng)
    (body,) = fast.bodies
    assert body.replacement is not None and {"MatMul", "Tanh"} <= {
        n.op for c in body.clusters if c.program is not None for n in c.nodes}  # fmt: skip
    # w is the same in every iteration: a constant in the body (the counter, a Const outside too, is not)
    kinds = [t.op.type for t in body.frozen.inputs]  # loop counter, max iterations, i, h, w
    assert kinds[0] == kinds[2] == kinds[3] == "Placeholder" and kinds[4] == "Const", kinds


def _loop_with_a_weight(x):
    """A loop step h -> tanh(h @ (0.5 w^T) + b): w (512 x 512 float32, 1 MiB) is a weight, b is not."""
    w = tf.constant(np.linspace(-0.05, 0.05, 512 * 512, dtype=np.float32).reshape(512, 512))
    b = tf.constant(np.linspace(-0.5, 0.5, 512, dtype=np.float32))

    def step(i, h):
        return i + 1, tf.tanh(tf.matmul(h, tf.transpose(w) * 0.5) + b)

    _, h = tf.while_loop(lambda i, h: i < 3, step, [tf.constant(0), x])
    return h


def test_a_loop_keeps_a_large_constant_as_a_weight_argument(rng):
    """A body does not take copies of large loop-invariant constants (an LLM's decode loop
    takes all of its weights): they stay arguments, and what is computed from them alone (the
    transpose, the scaling) is a memoized kernel; small ones are still folded."""
    sig = [tf.TensorSpec([None, 512])]
    fast = tftvm.optimize(_loop_with_a_weight, sig, keep_faster=False)
    compiled = tftvm.compile_model(_loop_with_a_weight, sig, keep_faster=False)
    for batch in (1, 3):
        x = rng.standard_normal((batch, 512)).astype(np.float32)
        want = _loop_with_a_weight(tf.constant(x)).numpy()
        np.testing.assert_allclose(fast(x).numpy(), want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(compiled(x).numpy(), want, rtol=1e-4, atol=1e-5)
    (body,) = fast.bodies
    kinds = {t.name: t.op.type for t in body.frozen.inputs}  # loop counter, max iterations, i, h, w, b
    (weight,) = body.frozen.weights
    assert kinds[weight] == "Placeholder" and list(kinds.values()).count("Const") == 2, kinds  # b, max iterations
    nodes = [n for f in body.function_defs for n in f.node_def]
    largest = max(len(n.attr["value"].tensor.tensor_content) for n in nodes if n.op == "Const")
    assert largest < 512 * 512 * 4
    assert any(n.op == "TvmCall" and n.attr["memoize"].b for n in nodes)


def test_cond_inside_a_loop_body(rng):
    def model(x):
        return _hand_written_loop(x, nested=True)

    fast = tftvm.optimize(model, SIG)
    _check(model, fast, rng)
    (body,) = fast.bodies
    assert body.replacement is not None
    assert {b.attr for b in body.inner} == {"then_branch", "else_branch"}
    assert any(b.replacement is not None for b in body.inner)


def test_a_body_that_fails_keeps_the_original(rng, monkeypatch):
    from tftvm.graph.offload import control_flow

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(control_flow, "_check_outputs", broken)
    model = _model(L.LSTM(8))
    fast = tftvm.optimize(model, SIG)
    _check(model, fast, rng)
    (body,) = fast.bodies
    assert body.replacement is None and "boom" in body.error
    assert body.function in _functions(fast)


LOAD = """
import numpy as np, tensorflow as tf, tftvm
m = tf.saved_model.load({path!r})
np.save({out!r}, m(tf.constant(np.load({x!r}))).numpy())
"""


def test_optimized_lstm_saves_and_loads_in_a_fresh_process(tmp_path, rng):
    model = _model(L.LSTM(8))
    fast = tftvm.optimize(model, SIG)
    tf.saved_model.save(fast, str(tmp_path / "m"))
    x = rng.standard_normal((3, 5, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    done = run_python(LOAD.format(path=str(tmp_path / "m"), out=str(tmp_path / "y.npy"), x=str(tmp_path / "x.npy")))
    assert done.returncode == 0, done.stderr[-3000:]
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), model(x).numpy(), rtol=1e-4, atol=1e-4)
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel.FromString((tmp_path / "m" / "saved_model.pb").read_bytes())
    library = saved.meta_graphs[0].graph_def.library.function
    body = fast.bodies[0].replacement
    assert any(n.op == "TvmCall" for f in library if f.signature.name == body for n in f.node_def)
