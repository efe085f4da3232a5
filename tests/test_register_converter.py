"""A user's converter through the public hook, `tftvm.graph.register_converter`: the op then
runs in TVM on every path, against TF's own op."""
import numpy as np
import pytest
import tensorflow as tf
import tftvm
from tftvm.graph import CONVERTERS, register_converter
from tvm import relax


@pytest.fixture(autouse=True)
def restored_table():
    saved = dict(CONVERTERS)
    yield
    CONVERTERS.clear()
    CONVERTERS.update(saved)


def _in_tf(optimized) -> list[str]:
    return [op.op for op in optimized.summary().in_tf]


def test_a_users_converter_takes_an_op_tftvm_lacks_to_tvm(rng):
    fn = tf.function(lambda x: tf.math.rint(x * 2.0) + 1.0)
    signature = [tf.TensorSpec([None, 5])]
    assert "Rint" in _in_tf(tftvm.optimize(fn, signature, keep_faster=False))

    @register_converter("Rint")
    def rint(ctx, node, x):
        return relax.op.round(x)  # halves to even, as rint

    fast = tftvm.optimize(fn, signature, keep_faster=False)
    assert fast.summary().in_tf == [] and fast.summary().offloaded == 3
    x = rng.standard_normal((4, 5)).astype(np.float32)
    x[0, :3] = 0.25, -0.75, 1.25  # halves once doubled
    np.testing.assert_allclose(fast(x).numpy(), fn(x).numpy(), rtol=1e-5, atol=1e-6)
    compiled = tftvm.compile_model(fn, signature, keep_faster=False)
    assert compiled.summary().in_tf == []
    np.testing.assert_allclose(np.asarray(compiled(x)), fn(x).numpy(), rtol=1e-5, atol=1e-6)


def test_an_op_with_a_converter_is_replaced_only_when_asked(rng):
    def doubled_tanh(ctx, node, x):
        return relax.op.multiply(relax.op.tanh(x), relax.const(2.0, "float32"))

    with pytest.raises(ValueError, match=r"\['Tanh'\] already have a converter; pass replace=True"):
        register_converter("Tanh")(doubled_tanh)
    register_converter("Tanh", replace=True)(doubled_tanh)
    fn = tf.function(lambda x: tf.tanh(x) + 1.0)
    fast = tftvm.optimize(fn, [tf.TensorSpec([3])], keep_faster=False, min_cluster_size=1)
    assert fast.summary().in_tf == []
    x = rng.standard_normal(3).astype(np.float32)
    np.testing.assert_allclose(fast(x).numpy(), 2.0 * np.tanh(x) + 1.0, rtol=1e-5, atol=1e-6)


def test_broadcast_makes_two_none_batches_one(rng):
    """Two inputs with a None batch get two symbolic dims; Relax cannot infer the shape of
    xdivy(x, y) over them, so without broadcast=True the node stays in TF, and with it the
    dims are made one and the node converts."""
    fn = tf.function(lambda x, y: tf.math.xdivy(x * 1.0, y * 1.0))
    signature = [tf.TensorSpec([None, 3]), tf.TensorSpec([None, 3])]
    x, y = (rng.standard_normal((4, 3)).astype(np.float32) for _ in range(2))
    x[0, 0] = y[1, 1] = 0.0

    def xdivy(ctx, node, x, y):
        zero = relax.const(0.0, "float32")
        return relax.op.where(relax.op.equal(x, zero), zero, relax.op.divide(x, y))

    register_converter("Xdivy")(xdivy)
    fast = tftvm.optimize(fn, signature, keep_faster=False, min_cluster_size=1)
    assert "Xdivy" in _in_tf(fast)
    reasons = [op.reason for op in fast.summary().in_tf if op.op == "Xdivy"]
    assert "cannot infer the shape" in reasons[0], reasons

    register_converter("Xdivy", broadcast=True, replace=True)(xdivy)
    fast = tftvm.optimize(fn, signature, keep_faster=False, min_cluster_size=1)
    assert fast.summary().in_tf == []
    np.testing.assert_allclose(fast(x, y).numpy(), fn(x, y).numpy(), rtol=1e-5, atol=1e-6)


def test_declared_requirements_keep_a_node_out_of_every_cluster(rng, caplog):
    """A converter's declared constant inputs and dtypes are checked when nodes are marked: a
    node that does not meet them is never clustered (no cluster is compiled, refused and
    clustered again for it), and the report gives the reason."""
    import logging

    def rint(ctx, node, x):
        return relax.op.round(x)

    register_converter("Rint", dtypes={"float32"})(rint)
    fn = tf.function(lambda x, axis: tf.reduce_sum(tf.math.rint(x * 2.0) + 1.0, axis=axis, keepdims=True) * 3.0)
    signature = [tf.TensorSpec([4, 5], tf.float64), tf.TensorSpec([], tf.int32)]
    with caplog.at_level(logging.WARNING, logger="tftvm.graph.offload.pipeline"):
        fast = tftvm.optimize(fn, signature, keep_faster=False, min_cluster_size=1)
    reasons = {op.op: op.reason for op in fast.summary().in_tf}
    assert reasons == {"Rint": "Rint of float64: its converter takes ['float32']",
                       "Sum": "input 1 of Sum must be a constant (it is axis:0)"}, reasons  # fmt: skip
    assert "stays in TF" not in caplog.text, caplog.text  # nothing refused at conversion
    x = rng.standard_normal((4, 5))
    np.testing.assert_allclose(fast(x, 1).numpy(), fn(x, 1).numpy(), rtol=1e-12)
