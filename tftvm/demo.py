"""`tftvm demo`: a TVM kernel inside a small TF model, checked against TF and timed."""
from __future__ import annotations

import time

import numpy as np
import tensorflow as tf


def _median_us(fn, repeats: int = 200) -> float:
    for _ in range(10):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e6)


def build_bias_gelu():
    """A fused bias-add + tanh-GELU epilogue as one TVM kernel (TF runs it as 8 ops)."""
    from tvm import te, tirx

    n, units = te.var("n"), 256
    x = te.placeholder((n, units), "float32", name="x")
    b = te.placeholder((units,), "float32", name="b")

    def gelu(i, j):
        v = x[i, j] + b[j]
        return 0.5 * v * (1.0 + tirx.tanh(0.7978845608 * (v + 0.044715 * v * v * v)))

    y = te.compute((n, units), gelu, name="y")
    import tftvm

    return tftvm.op([x, b], [y], name="bias_gelu")


def run(batch: int = 64) -> list[tuple[str, float, float]]:
    """Returns (what, TF µs, tftvm µs) rows; raises if results disagree."""
    bias_gelu = build_bias_gelu()
    rng = np.random.default_rng(0)
    w = tf.constant(rng.standard_normal((128, 256), dtype=np.float32) * 0.1)
    b = tf.constant(rng.standard_normal(256, dtype=np.float32))
    x = tf.constant(rng.standard_normal((batch, 128), dtype=np.float32))

    @tf.function
    def tf_model(x):
        return tf.nn.gelu(tf.matmul(x, w) + b, approximate=True)

    @tf.function
    def tftvm_model(x):
        return bias_gelu(tf.matmul(x, w), b)

    want, got = tf_model(x).numpy(), tftvm_model(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    h = tf.matmul(x, w)
    return [
        ("bias+GELU, eager", _median_us(lambda: tf.nn.gelu(h + b, approximate=True)),
         _median_us(lambda: bias_gelu(h, b))),
        ("MLP layer, tf.function", _median_us(lambda: tf_model(x)), _median_us(lambda: tftvm_model(x))),
    ]  # fmt: skip
