"""The default CPU schedule: tiled reductions compute what NumPy computes, for any shape."""
import numpy as np
import pytest
import tensorflow as tf
import tftvm
import tvm
from tftvm.schedule import default_cpu_schedule
from tvm import te


def matmul(m, k, n):
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    return A, B, te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")


def scheduled_script(A, B, C) -> str:
    return default_cpu_schedule(tvm.IRModule({"mm": te.create_prim_func([A, B, C])})).script()


@pytest.mark.parametrize("m, k, n, tiled", [
    (64, 48, 64, True),    # rows and columns both tile
    (13, 7, 48, True),     # rows do not divide 8: one-row tiles
    ("m", 33, 16, True),   # symbolic rows, one vector of columns
    (16, 12, 40, True),    # 40 columns, no multiple of a vector: half-vector tiles (Xception's 728)
    (5, 6, 7, False),      # columns not a vector multiple: parallel loop only
])  # fmt: skip
def test_matmul_matches_numpy(m, k, n, tiled, rng):
    A, B, C = matmul(te.var("m") if m == "m" else m, k, n)
    assert ("C_local" in scheduled_script(A, B, C)) == tiled
    op = tftvm.op([A, B], [C], name=f"sched_mm_{m}_{k}_{n}")
    for rows in ([1, 9, 24] if m == "m" else [m]):
        a = rng.standard_normal((rows, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        np.testing.assert_allclose(op(a, b).numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_tiled_conv_and_pool_match_tf(rng):
    x = te.placeholder((1, 6, 6, 32), name="x")
    w = te.placeholder((3, 3, 32, 32), name="w")
    rh, rw, rc = (te.reduce_axis((0, e), name=nm) for e, nm in ((3, "rh"), (3, "rw"), (32, "rc")))
    conv = te.compute((1, 4, 4, 32), lambda b, h, v, c: te.sum(x[b, h + rh, v + rw, rc] * w[rh, rw, rc, c],
                                                            axis=[rh, rw, rc]), name="conv")  # fmt: skip
    ph, pw = te.reduce_axis((0, 2), name="ph"), te.reduce_axis((0, 2), name="pw")
    pool = te.compute((1, 2, 2, 32), lambda b, h, v, c: te.max(conv[b, 2 * h + ph, 2 * v + pw, c],
                                                            axis=[ph, pw]), name="pool")  # fmt: skip
    op = tftvm.op([x, w], [pool], name="sched_conv_pool")
    xv = rng.standard_normal((1, 6, 6, 32)).astype(np.float32)
    wv = rng.standard_normal((3, 3, 32, 32)).astype(np.float32)
    want = tf.nn.max_pool2d(tf.nn.conv2d(xv, wv, 1, "VALID"), 2, 2, "VALID")
    np.testing.assert_allclose(op(xv, wv).numpy(), want.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m, k, n, parallel", [
    (8, 16, 32, False),      # 4K iterations: the pool's wake-up would cost more than the work
    ("m", 32, 256, False),   # an RNN step's x.W, batch counted as TYPICAL_DIM
    (256, 256, 64, True),    # 4M iterations
    ("m", 512, 512, True),
])  # fmt: skip
def test_only_blocks_worth_it_run_in_parallel(m, k, n, parallel, rng):
    A, B, C = matmul(te.var("m") if m == "m" else m, k, n)
    assert ("T.parallel" in scheduled_script(A, B, C)) == parallel
    op = tftvm.op([A, B], [C], name=f"sched_par_{m}_{k}_{n}")
    rows = 5 if m == "m" else m
    a, b = rng.standard_normal((rows, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    np.testing.assert_allclose(op(a, b).numpy(), a @ b, rtol=1e-4, atol=1e-3)
