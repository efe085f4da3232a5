"""Memoized TvmCall nodes: a computation from a model's weights alone runs once, not per call.

A memoized node keeps its last inputs and outputs and returns the outputs again while its
inputs are the very same buffers. That is right only while TF never writes a buffer the node
still holds: every way TF updates a variable must give the variable a new buffer (or copy
before writing) rather than write the held one. These tests update variables each of those
ways and compare with NumPy; a stale result fails them.
"""
import re

import keras
import numpy as np
import pytest
import tensorflow as tf
import tftvm
from tvm import te

N = 64


@pytest.fixture(scope="module")
def affine():
    x = te.placeholder((N,), "float32", name="x")
    y = te.compute((N,), lambda i: x[i] * 2.0 + 1.0, name="y")
    return tftvm.op([x], y, name="affine")


def address(t) -> int:
    return np.asarray(t).__array_interface__["data"][0]  # TF hands NumPy its CPU buffer


UPDATES = {  # each way of changing a variable, with what NumPy then expects it to hold
    "assign": lambda v, n: v.assign(n),
    "assign_add": lambda v, n: v.assign_add(n - v.numpy()),
    "assign_sub": lambda v, n: v.assign_sub(v.numpy() - n),
    "slice_assign": lambda v, n: (v[: N // 2].assign(n[: N // 2]), v[N // 2 :].assign(n[N // 2 :])),
    "scatter_update": lambda v, n: v.scatter_update(tf.IndexedSlices(tf.constant(n), tf.range(N))),
    "sgd_step": lambda v, n: keras.optimizers.SGD(1.0).apply([tf.constant(v.numpy() - n)], [v]),
}


@pytest.mark.parametrize("update", sorted(UPDATES))
def test_a_memoized_op_follows_every_kind_of_variable_update(affine, update, rng):
    v = tf.Variable(rng.standard_normal(N).astype(np.float32))
    f = tf.function(lambda: affine.memoized(v.read_value()))
    first = f()
    np.testing.assert_allclose(first, v.numpy() * 2 + 1, rtol=1e-6)
    held = first.numpy().copy()
    new = rng.standard_normal(N).astype(np.float32)
    UPDATES[update](v, new)
    np.testing.assert_allclose(v.numpy(), new, atol=1e-6)
    np.testing.assert_allclose(f(), v.numpy() * 2 + 1, rtol=1e-6)
    np.testing.assert_array_equal(first, held)  # the first result, still held by us, is unchanged


def test_the_same_buffers_replay_the_last_outputs_and_new_ones_recompute(affine, rng):
    v = tf.Variable(rng.standard_normal(N).astype(np.float32))
    f = tf.function(lambda: affine.memoized(v.read_value()))
    a, b = f(), f()
    assert address(a) == address(b)  # replayed: the node's own output buffer
    g = tf.function(lambda x: affine.memoized(x))
    for _ in range(3):  # a fresh input buffer each call
        x = rng.standard_normal(N).astype(np.float32)
        np.testing.assert_allclose(g(tf.constant(x)), x * 2 + 1, rtol=1e-6)


def test_a_consumer_cannot_write_into_a_replayed_output(affine, rng):
    """TF ops reuse an input's buffer for their output only where nothing else holds it: the
    memo holds its outputs, so an in-place candidate (an add of the output) writes elsewhere."""
    v = tf.Variable(rng.standard_normal(N).astype(np.float32))
    f = tf.function(lambda: affine.memoized(v.read_value()) + 1.0)
    want = v.numpy() * 2 + 2
    for _ in range(3):
        np.testing.assert_allclose(f(), want, rtol=1e-6)


def bn_model():
    """Conv + batch norm with statistics far from their initial values, as a trained model has."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(8, 3, padding="same"),
                              keras.layers.BatchNormalization(), keras.layers.ReLU(),
                              keras.layers.DepthwiseConv2D(3, padding="same"), keras.layers.BatchNormalization(),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(4)])  # fmt: skip
    randomize_batch_norms(model, np.random.default_rng(1))
    return model


def randomize_batch_norms(model, rng):
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            for v, (lo, hi) in zip(layer.weights, [(0.5, 1.5), (-0.5, 0.5), (-0.5, 0.5), (0.5, 2.0)]):
                v.assign(rng.uniform(lo, hi, v.shape).astype(np.float32))


def test_under_enable_batch_norm_statistics_changed_after_the_first_call_show(rng):
    """The pass lifts rsqrt(variance + eps) * scale into memoized kernels; new statistics (set
    by hand, then by a training step) must reach the next prediction."""
    model = bn_model()
    x = rng.standard_normal((2, 8, 8, 3)).astype(np.float32)
    with tftvm.enabled(keep_faster=False):
        predict = tf.function(lambda x: model(x, training=False))
        np.testing.assert_allclose(predict(x), model(x, training=False), rtol=1e-5, atol=1e-5)
        assert "Rsqrt" in tftvm.enabled_report()
        randomize_batch_norms(model, np.random.default_rng(2))
        np.testing.assert_allclose(predict(x), model(x, training=False), rtol=1e-5, atol=1e-5)
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
        model.fit(x, rng.standard_normal((2, 4)).astype(np.float32), epochs=1, verbose=0)
    tftvm.disable(keep_rewritten=True)  # `predict` keeps its rewritten graph; TF checks it
    np.testing.assert_allclose(predict(x), model(x, training=False), rtol=1e-5, atol=1e-5)
    tftvm.disable()


def test_batch_norm_folds_into_the_conv_weights_on_every_path(rng):
    """conv (+ bias) then batch norm: the scale goes into the weights (fold_scales), frozen
    (optimize, compile_model: constants) or not (enable: variables, lifted out of the
    activation kernels). TF's freezing leaves the depthwise conv's scale as a multiply."""
    model = bn_model()
    x = rng.standard_normal((2, 8, 8, 3)).astype(np.float32)
    want = model(x, training=False)
    predict = tf.function(lambda x: model(x, training=False), autograph=False)
    optimized = tftvm.optimize(predict, [tf.TensorSpec([2, 8, 8, 3])], keep_faster=False)
    compiled = tftvm.compile_model(predict, [tf.TensorSpec([None, 8, 8, 3])], keep_faster=False)
    np.testing.assert_allclose(optimized(x), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(compiled(x), want, rtol=1e-5, atol=1e-5)
    for kernels in ([k.name for k in optimized.kernels()], [n for n, _ in compiled.static_kernels([[(2, 8, 8, 3)]])]):
        convs = [k for k in kernels if "conv2d" in k]
        assert len(convs) == 2 and not any("multiply" in k for k in convs), kernels


def conv_bias_bn(x, w, bias, scale, offset, mean, variance):
    y = tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), bias)
    return tf.raw_ops.FusedBatchNormV3(x=y, scale=scale, offset=offset, mean=mean, variance=variance,
                                       epsilon=1e-3, is_training=False)[0]  # fmt: skip


@pytest.mark.parametrize("memoize", [False, True])
def test_a_batch_norm_scale_from_variables_folds_into_the_conv_weights(memoize, rng):
    """Weights as inputs (enable()'s variables): (conv(x, w) + b) * s becomes conv(x, w * s) + b * s,
    so the conv's kernel multiplies nothing per output element (w * s is lifted out of it)."""
    from conftest import tf_graph
    from tftvm.graph.frontend import to_relax
    from tftvm.graph.lowering.program import RelaxProgram

    shapes = [(3, 3, 3, 8), (8,), (8,), (8,), (8,), (8,)]
    weights = [tf.constant(rng.uniform(0.5, 1.5, s).astype(np.float32)) for s in shapes]
    specs = [tf.TensorSpec([2, 6, 6, 3])] + [tf.TensorSpec(s) for s in shapes]
    nodes, inputs, outputs, _ = tf_graph(conv_bias_bn, specs)
    program = RelaxProgram(to_relax(nodes, inputs, outputs), name=f"conv_bias_bn_{memoize}", weights=range(1, 7),
                           memoize_weights=memoize)  # fmt: skip
    (conv,) = [k.name.split("/")[-1] for k in program.kernels if "conv2d" in k.name and "transform" not in k.name]
    assert "multiply" not in conv, [k.name for k in program.kernels]
    x = tf.constant(rng.standard_normal((2, 6, 6, 3)).astype(np.float32))
    np.testing.assert_allclose(program(x, *weights), conv_bias_bn(x, *weights), rtol=1e-5, atol=1e-5)


def conv_bn(x, w1, scale1, offset1, mean1, var1, w2, scale2, offset2, mean2, var2):
    y = tf.nn.conv2d(x, w1, 1, "SAME")
    y = tf.raw_ops.FusedBatchNormV3(x=y, scale=scale1, offset=offset1, mean=mean1, variance=var1,
                                    epsilon=1e-3, is_training=False)[0]  # fmt: skip
    y = tf.nn.depthwise_conv2d(tf.nn.relu(y), w2, [1, 1, 1, 1], "SAME")
    return tf.raw_ops.FusedBatchNormV3(x=y, scale=scale2, offset=offset2, mean=mean2, variance=var2,
                                       epsilon=1e-3, is_training=False)[0]  # fmt: skip


def conv_bn_weights(rng, channels=32):
    bn = lambda: [rng.uniform(0.5, 1.5, channels), rng.uniform(-0.5, 0.5, channels),  # noqa: E731
                  rng.uniform(-0.5, 0.5, channels), rng.uniform(0.5, 2, channels)]  # fmt: skip
    arrays = [rng.standard_normal((3, 3, 3, channels)), *bn(), rng.standard_normal((3, 3, channels, 1)), *bn()]
    return [tf.constant(a.astype(np.float32)) for a in arrays]


def test_the_memoized_weight_preparation_is_one_kernel(rng):
    """Memoized, what the weights alone compute (both batch norms' scales and offsets, folded
    into the conv weights, and the conv weights packed as a frozen model's constants are) is
    one kernel, one node per call; not memoized (a training step), the default fused kernels
    run every call and the conv reads its weights unpacked. Both follow new weights."""
    from conftest import tf_graph
    from tftvm.graph.frontend import to_relax
    from tftvm.graph.lowering.program import RelaxProgram

    weights = conv_bn_weights(rng)
    specs = [tf.TensorSpec([2, 6, 6, 3])] + [tf.TensorSpec(w.shape) for w in weights]
    nodes, inputs, outputs, _ = tf_graph(conv_bn, specs)
    programs = {memoize: RelaxProgram(to_relax(nodes, inputs, outputs), name=f"conv_bn_{memoize}",
                                      weights=range(1, 11), memoize_weights=memoize)
                for memoize in (True, False)}  # fmt: skip
    merged = [k.name for k in programs[True].kernels if "main_transform_params" in k.name]
    assert merged == ["conv_bn_True/main_transform_params_as_one_kernel"], merged
    # The same main kernels; unmerged, the preparation is several kernels.
    assert len(programs[False].kernels) >= len(programs[True].kernels) + 1
    for memoize, program in programs.items():
        (conv,) = [k for k in program.kernels if k.name.split("/")[-1].startswith("fused_conv2d_")]
        ranks = sorted(len(t.dims) for t in conv.signature.inputs)
        assert ranks[-1] == (5 if memoize else 4), (memoize, [t.spec for t in conv.signature.inputs])
    x = tf.constant(rng.standard_normal((2, 6, 6, 3)).astype(np.float32))
    for _ in range(2):
        for program in programs.values():
            np.testing.assert_allclose(program(x, *weights), conv_bn(x, *weights), rtol=1e-5, atol=1e-5)
        weights = conv_bn_weights(rng)



def test_a_large_weight_preparation_is_cut_into_kernels_in_order(rng, monkeypatch):
    """Past CALLS_PER_KERNEL calls the memoized preparation is several kernels, each passing
    on what later ones and `main` use (here one call each, so a kernel of one result too);
    the results are the same, and follow new weights."""
    from conftest import tf_graph
    from tftvm.graph.frontend import to_relax
    from tftvm.graph.lowering import program as program_module

    monkeypatch.setattr(program_module, "CALLS_PER_KERNEL", 1)
    weights = conv_bn_weights(rng)
    specs = [tf.TensorSpec([2, 6, 6, 3])] + [tf.TensorSpec(w.shape) for w in weights]
    nodes, inputs, outputs, _ = tf_graph(conv_bn, specs)
    program = program_module.RelaxProgram(to_relax(nodes, inputs, outputs), name="conv_bn_cut",
                                          weights=range(1, 11), memoize_weights=True)  # fmt: skip
    parts = [k.name for k in program.kernels if "main_transform_params" in k.name]
    # (BlockBuilder gives two equal kernels one function: both batch norms' scales, say.)
    assert len(parts) >= 3 and all(re.fullmatch(r"conv_bn_cut/main_transform_params_as_kernel\d+", p) for p in parts)
    x = tf.constant(rng.standard_normal((2, 6, 6, 3)).astype(np.float32))
    for _ in range(2):
        np.testing.assert_allclose(program(x, *weights), conv_bn(x, *weights), rtol=1e-5, atol=1e-5)
        weights = conv_bn_weights(rng)