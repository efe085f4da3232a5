"""tftvm.optimize end to end: clusters run as tftvm ops, the rest in TF, and a report."""
import keras
import numpy as np
import pytest
import tensorflow as tf
import tftvm
from tftvm import native

from conftest import run_python


@pytest.fixture(scope="module")
def mlp():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                             keras.layers.Dense(8), keras.layers.Softmax()])  # fmt: skip


def test_mlp_is_fully_offloaded_and_matches(mlp, rng):
    fast = tftvm.optimize(mlp, input_signature=[tf.TensorSpec([None, 16])])
    for n in (1, 7):
        x = rng.standard_normal((n, 16)).astype(np.float32)
        np.testing.assert_allclose(fast(x).numpy(), mlp(x).numpy(), rtol=1e-5, atol=1e-6)
    report = fast.report()
    assert "(100.0%)" in report.splitlines()[0], report
    assert "MatMul x2" in report and "TVM kernels" in report


def test_unsupported_op_splits_the_graph_and_is_reported(rng):
    w = tf.constant(rng.standard_normal((4, 4)).astype(np.float32))

    def model(x):
        h = tf.nn.relu(tf.matmul(x, w) + 1.0)
        h = tf.math.special.bessel_i0e(h)  # no converter: stays in TF
        return tf.tanh(tf.matmul(h, w) * 0.5)

    fast = tftvm.optimize(model, [tf.TensorSpec([None, 4])])
    x = rng.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(fast(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)
    report = fast.report()
    assert report.count("TVM kernels") == 2
    assert "stayed in TF: BesselI0e x1: no converter for BesselI0e" in report


def test_failed_cluster_stays_in_tf_unless_strict(rng):
    def model(x, shape):
        return tf.reshape(tf.exp(x) * 2.0 + 1.0, shape)  # a shape from outside: not convertible

    sig = [tf.TensorSpec([6], tf.float32), tf.TensorSpec([2], tf.int32)]
    fast = tftvm.optimize(model, sig)
    x = rng.standard_normal(6).astype(np.float32)
    np.testing.assert_allclose(fast(x, tf.constant([2, 3])).numpy(), model(x, [2, 3]).numpy(), rtol=1e-6)
    # The Reshape alone stays in TF; the rest of its cluster is compiled without it.
    assert "stayed in TF: Reshape x1: input 1 of Reshape must be a constant" in fast.report()
    assert fast.summary().offloaded == 3 and fast.summary().failed_clusters == []
    with pytest.raises(Exception, match="must be a constant"):
        tftvm.optimize(model, sig, strict=True)


def test_min_cluster_size_and_deny_list(mlp, rng):
    small = tftvm.optimize(lambda x: tf.nn.relu(x) * 2.0, [tf.TensorSpec([3])], min_cluster_size=3)
    assert "offloaded to TVM: 0" in small.report()
    np.testing.assert_allclose(small(np.array([-1.0, 0.5, 2.0], np.float32)).numpy(), [0.0, 1.0, 4.0])
    denied = tftvm.optimize(mlp, [tf.TensorSpec([None, 16])], deny={"Softmax"})
    assert "stayed in TF: Softmax x1: in the deny list" in denied.report()
    x = rng.standard_normal((2, 16)).astype(np.float32)
    np.testing.assert_allclose(denied(x).numpy(), mlp(x).numpy(), rtol=1e-5, atol=1e-6)


LOAD = """
import numpy as np, tensorflow as tf, tftvm
m = tf.saved_model.load({path!r})
np.save({out!r}, m(tf.constant(np.load({x!r}))).numpy())
"""


def test_optimized_model_saves_and_loads_in_a_fresh_process(mlp, tmp_path, rng):
    import shutil

    fast = tftvm.optimize(mlp, [tf.TensorSpec([None, 16])])
    tf.saved_model.save(fast, str(tmp_path / "sm"))
    x = rng.standard_normal((4, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    fresh = tmp_path / "cache"
    shutil.copytree(native.library_path().parent, fresh / "native" / native.build_dir().name)
    proc = run_python(LOAD.format(path=str(tmp_path / "sm"), out=str(tmp_path / "y.npy"), x=str(tmp_path / "x.npy")),
                      env={"TFTVM_CACHE_DIR": str(fresh)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), fast(x).numpy())


def test_small_cnn_with_symbolic_batch(rng):
    keras.utils.set_random_seed(0)
    cnn = keras.Sequential([
        keras.Input((16, 16, 3)), keras.layers.Conv2D(8, 3, padding="same"),
        keras.layers.BatchNormalization(), keras.layers.ReLU(), keras.layers.MaxPooling2D(),
        keras.layers.DepthwiseConv2D(3, padding="same"), keras.layers.ReLU(6.0),
        keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(5),
    ])  # fmt: skip
    fast = tftvm.optimize(cnn, [tf.TensorSpec([None, 16, 16, 3])])
    for n in (1, 3):
        x = rng.standard_normal((n, 16, 16, 3)).astype(np.float32)
        np.testing.assert_allclose(fast(x).numpy(), cnn(x).numpy(), rtol=1e-4, atol=1e-5)
    assert "(100.0%)" in fast.report().splitlines()[0], fast.report()
    assert "Conv2D x1" in fast.report() and "DepthwiseConv2dNative x1" in fast.report()


def test_mobilenet_v2_small_input(rng):
    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3), classifier_activation=None)
    fast = tftvm.optimize(model, [tf.TensorSpec([None, 32, 32, 3])])
    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    want = model(x).numpy()
    assert np.abs(want).max() > 0  # a real signal to compare
    np.testing.assert_allclose(fast(x).numpy(), want, rtol=1e-3, atol=1e-3 * np.abs(want).max())
    first = fast.report().splitlines()[0]
    done, total = int(first.split("offloaded to TVM: ")[1].split()[0]), int(first.split()[2].rstrip(","))
    assert done / total >= 0.9, first


def test_validate_reports_errors_per_output(mlp, rng):
    fast = tftvm.optimize(mlp, [tf.TensorSpec([None, 16])], validate=True)
    (abs_err, rel_err), = fast.validation
    assert abs_err < 1e-5 and "validation: output 0: max abs error" in fast.report()
    x = rng.standard_normal((3, 16)).astype(np.float32)
    given = tftvm.optimize(mlp, [tf.TensorSpec([None, 16])], validate=[x])
    assert given.validation[0][0] < 1e-5


def test_no_signature_compiles_per_shape_then_symbolic(mlp, rng):
    fast = tftvm.optimize(mlp, cache_size=8)
    for n in (2, 2, 5, 9, 5):
        x = rng.standard_normal((n, 16)).astype(np.float32)
        np.testing.assert_allclose(fast(x).numpy(), mlp(x).numpy(), rtol=1e-5, atol=1e-6)
    # (2, 16) compiled once; the second shape compiled a (None, 16) variant serving 5 and 9.
    assert fast.compiles == 2
    assert "[[None, 16]]" in fast.report()


def test_lru_evicts_the_oldest_variant(rng):
    fast = tftvm.optimize(lambda x, y: tf.nn.relu(x * 2.0 + 1.0) - y, cache_size=1)
    a = np.ones(3, np.float32)
    fast(a, a)                                   # variant for (3,), (3,)
    fast(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))  # new pattern evicts it
    fast(a, a)                                   # recompiled
    assert fast.compiles == 3
    with pytest.raises(ValueError, match="cache_size must be >= 1"):
        tftvm.optimize(lambda x: x, cache_size=0)


def test_transformer_encoder_block_symbolic_batch(rng):
    keras.utils.set_random_seed(0)
    inp = keras.Input((10, 32))
    att = keras.layers.MultiHeadAttention(num_heads=4, key_dim=8)(inp, inp)
    h = keras.layers.LayerNormalization()(inp + att)
    f = keras.layers.Dense(64, activation="gelu")(h)
    model = keras.Model(inp, keras.layers.LayerNormalization()(h + keras.layers.Dense(32)(f)))
    fast = tftvm.optimize(model, [tf.TensorSpec([None, 10, 32])])
    for n in (1, 3):
        x = rng.standard_normal((n, 10, 32)).astype(np.float32)
        np.testing.assert_allclose(fast(x).numpy(), model(x).numpy(), rtol=1e-4, atol=1e-5)
    first = fast.report().splitlines()[0]
    assert "(100.0%)" in first, first


def test_control_dependencies_survive_the_rewrite():
    def fn(x):
        y = tf.nn.relu(x * 2.0 + 1.0) - 0.5
        with tf.control_dependencies([tf.debugging.assert_less(tf.reduce_max(x), 10.0)]):
            z = tf.identity(y)
        return tf.math.special.bessel_i0e(z) + 1.0

    fast = tftvm.optimize(fn, [tf.TensorSpec([None])])
    assert "cluster 0: 4 ops" in fast.report()
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(fast(x).numpy(), fn(x).numpy(), rtol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match="assert_less"):
        fast(x + 20.0)


def test_a_cluster_reads_the_dims_its_producer_cluster_knows(rng):
    """TF's shape inference loses the spatial dims of a Reshape to a shape gathered from a
    Shape (Keras' Dense on a 4-D input); the cluster computing it knows them. A second cluster
    fed by it after a denied Tanh of it (a control edge: the two cannot merge) gets them, so
    its depthwise conv, which needs static spatial dims, converts."""
    w = tf.constant(rng.standard_normal((3, 3, 8, 1)).astype(np.float32))

    def fn(x):
        a = tf.reshape(x * 2.0, tf.concat([tf.gather(tf.shape(x), [0, 1, 2]), [8]], 0)) + 1.0
        # traced: TF infers a's shape as [None, None, None, 8]
        t = tf.tanh(a)
        with tf.control_dependencies([t]):
            b = tf.identity(a)
        return tf.nn.relu(tf.nn.depthwise_conv2d(b, w, [1, 1, 1, 1], "SAME")) * 3.0, t

    optimized = tftvm.optimize(fn, [tf.TensorSpec([None, 5, 5, 8], tf.float32)], deny={"Tanh"})
    summary = optimized.summary()
    assert [op.op for op in summary.in_tf] == ["Tanh"], optimized.report()
    for batch in (1, 3):
        x = rng.standard_normal((batch, 5, 5, 8)).astype(np.float32)
        for got, want in zip(optimized(x), fn(x)):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_a_nan_in_one_image_makes_its_outputs_nan_as_in_keras(rng):
    """A MobileNet-style block (conv, batch norm, ReLU6, depthwise conv, ReLU, pooling): one
    NaN pixel makes that image's logits NaN in Keras (eager, TF's own kernels); under
    optimize and enable() too (TVM's ReLU6 made it 6, and the image came out finite), while
    the other images match. (TF's graph mode gives finite logits here: grappler's fused
    oneDNN conv + ReLU6 drops the NaN.)"""
    from tftvm import enable_pass

    keras.utils.set_random_seed(3)
    inp = keras.Input((12, 12, 3))
    h = keras.layers.ReLU(6.0)(keras.layers.BatchNormalization()(keras.layers.Conv2D(8, 3, strides=2)(inp)))
    h = keras.layers.ReLU()(keras.layers.DepthwiseConv2D(3, padding="same")(h))
    model = keras.Model(inp, keras.layers.Dense(5)(keras.layers.GlobalAveragePooling2D()(h)))
    x = rng.standard_normal((3, 12, 12, 3)).astype(np.float32)
    x[1, 4, 7, 2] = np.nan
    want = model(x, training=False).numpy()
    assert np.isnan(want[1]).all() and np.isfinite(want[[0, 2]]).all()
    optimized = tftvm.optimize(tf.function(lambda x: model(x, training=False)), [tf.TensorSpec([None, 12, 12, 3])])
    assert optimized.summary().offloaded == optimized.summary().compute_nodes
    before = len(enable_pass.rewrites())
    with tftvm.enabled(keep_faster=False):
        enabled = tf.function(lambda x: model(x, training=False))(x).numpy()
    (rewrite,) = enable_pass.rewrites()[before:]
    assert rewrite.offloaded == rewrite.compute_nodes, rewrite.report
    for got in (optimized(x).numpy(), enabled):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)  # NaNs where Keras has them
