"""exp, sigmoid, tanh and erf: TVM's vector approximations as close to the truth as TF's own."""
import math

import numpy as np
import pytest
import tensorflow as tf
import tftvm
from tftvm.graph.lowering.program import fuse
from tvm import relax

FUNCTIONS = {  # name -> (TF op, float64 reference)
    "exp": (tf.math.exp, np.exp),
    "sigmoid": (tf.math.sigmoid, lambda v: 1 / (1 + np.exp(-v))),
    "tanh": (tf.math.tanh, np.tanh),
    "erf": (tf.math.erf, np.vectorize(math.erf, otypes=[np.float64])),
}
SPECIAL = [0.0, -0.0, 1e-8, -1e-8, 88.0, 89.0, -87.0, -104.0, 1e4, -1e4, np.inf, -np.inf, np.nan]


def kernel_script(name: str, dtype: str) -> str:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 64), dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(getattr(relax.op, name)(x))
        bb.emit_func_output(out)
    return fuse(bb.get()).script()


@pytest.mark.parametrize("name", FUNCTIONS)
def test_float32_gets_the_vector_approximation_and_other_dtypes_keep_tvms(name):
    assert f"T.{name}(" not in kernel_script(name, "float32")  # no call to the C library
    assert f"T.{name}(" in kernel_script(name, "float64")


@pytest.mark.parametrize("name", FUNCTIONS)
def test_error_is_no_larger_than_tfs(name, rng):
    tf_op, reference = FUNCTIONS[name]
    x = np.concatenate([(rng.standard_normal(50_000) * 8), np.linspace(-100, 100, 20_001), SPECIAL]).astype(np.float32)
    optimized = tftvm.optimize(tf_op, [tf.TensorSpec([None], tf.float32)], min_cluster_size=1)
    assert optimized.summary().fraction == 1.0
    got, theirs = optimized(x).numpy(), tf_op(x).numpy()
    want = reference(x.astype(np.float64))
    # Where the float64 value is no float32 (overflow, a denormal), TVM gives what TF gives.
    exact = np.isfinite(want) & (np.abs(want) > np.finfo(np.float32).tiny) & (np.abs(want) < np.finfo(np.float32).max)
    ours, tfs = (np.abs(v[exact] - want[exact]) / np.abs(want[exact]) for v in (got, theirs))
    assert ours.max() <= max(2 * tfs.max(), 4e-7), (name, ours.max(), tfs.max())
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[~exact & ~np.isnan(want)], theirs[~exact & ~np.isnan(want)], atol=1e-37)


def softmax64(x, log: bool):
    with np.errstate(invalid="ignore", over="ignore"):
        shifted = x - x.max(axis=-1, keepdims=True)
        total = np.exp(shifted).sum(axis=-1, keepdims=True)
        return shifted - np.log(total) if log else np.exp(shifted) / total


@pytest.mark.parametrize("width", [64, 77, 1031])  # 77 and 1031: a vectorized head and a scalar tail
@pytest.mark.parametrize("log", [False, True])
def test_softmax_rows_with_masks_nans_and_overflow_match_the_truth(log, width, rng):
    """softmax / log_softmax with fast exp (an attention's P = softmax(QK^T)): -inf masks give
    exactly 0 (log: -inf), a row of -inf or with a NaN gives NaNs, 1e4 no overflow; a row's
    max in its last elements, and a row of negatives, are found."""
    rows = rng.standard_normal((60, width)).astype(np.float32) * 8
    rows[1, 40:] = -np.inf
    rows[2, :] = -np.inf
    rows[3, 5] = np.nan
    rows[4, :3] = 1e4
    rows[5, :] = -1e4
    rows[6, -1] = 1e3
    rows[7, :] = -np.abs(rows[7]) - 100
    tf_op = tf.nn.log_softmax if log else tf.nn.softmax
    optimized = tftvm.optimize(tf_op, [tf.TensorSpec([None, width], tf.float32)], min_cluster_size=1)
    assert optimized.summary().fraction == 1.0
    assert "T.exp(" not in kernel_script_of(optimized)
    got, want = optimized(rows).numpy(), softmax64(rows.astype(np.float64), log)
    # A row with a NaN is NaN throughout, as in NumPy (TF's softmax gives NaN there and 0 elsewhere).
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[2]).all() and np.isnan(got[3]).all()
    np.testing.assert_array_equal(got[1, 40:], -np.inf if log else 0.0)
    # Error within twice TF's (an exp's error grows with |x - max|, as TF's does): relative for
    # probabilities, absolute for log-probabilities (near 0 for a row's dominant entry).
    exact = np.isfinite(want) & (np.abs(want) > np.finfo(np.float32).tiny)
    scale = np.ones_like(want[exact]) if log else np.abs(want[exact])
    ours, tfs = (np.abs(v[exact] - want[exact]) / scale for v in (got, tf_op(rows).numpy()))
    assert ours.max() <= max(2 * tfs.max(), 1e-6), (ours.max(), tfs.max())


def kernel_script_of(optimized) -> str:
    return "\n".join(k.prim_func.script() for k in optimized.kernels())
