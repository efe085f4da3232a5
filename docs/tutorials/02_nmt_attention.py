"""
The NMT story: a TVM batch matmul inside Transformer attention
==============================================================

The two batched matmuls of attention (``Q·Kᵀ`` and ``P·V``) become TVM kernels
inside an otherwise unchanged TF attention function; the result is checked
against TF and both are timed.

This is the case Alibaba described in "Bringing TVM into TensorFlow": in a
Transformer decoding one token at a time, attention multiplies many small
matrices (``[batch*heads, 1, 64] x [batch*heads, 64, seq]``), a shape that
general-purpose GEMM libraries are not tuned for.
"""

# %%
# The two kernels
# ---------------
# Shapes of one decoder step: batch 8, 8 heads, one query, 17 keys, head size 64.
# TVM compiles for exactly these shapes; Alibaba's kernels were specialized too.
import math
import time

import numpy as np
import tensorflow as tf
import tftvm
from tvm import te

BH, Q_LEN, KV_LEN, D = 8 * 8, 1, 17, 64

Q = te.placeholder((BH, Q_LEN, D), "float32", name="Q")
K = te.placeholder((BH, KV_LEN, D), "float32", name="K")
r = te.reduce_axis((0, D), "r")
S = te.compute((BH, Q_LEN, KV_LEN), lambda b, i, j: te.sum(Q[b, i, r] * K[b, j, r], axis=r), name="S")
q_kt = tftvm.op([Q, K], [S], name="q_kt")  # Q·Kᵀ without materializing Kᵀ

P = te.placeholder((BH, Q_LEN, KV_LEN), "float32", name="P")
V = te.placeholder((BH, KV_LEN, D), "float32", name="V")
t = te.reduce_axis((0, KV_LEN), "t")
O = te.compute((BH, Q_LEN, D), lambda b, i, j: te.sum(P[b, i, t] * V[b, t, j], axis=t), name="O")
p_v = tftvm.op([P, V], [O], name="p_v")
print(q_kt)
print(p_v)

# %%
# Attention, with the matmuls as parameters
# -----------------------------------------
# Everything else (scaling, softmax) stays TF. Swapping the matmuls is the only
# change to the model code.


def attention(q, k, v, qk, pv):
    scores = qk(q, k) / math.sqrt(D)
    return pv(tf.nn.softmax(scores, axis=-1), v)


def tf_qk(q, k):
    return tf.linalg.matmul(q, k, transpose_b=True)


tf_attention = tf.function(lambda q, k, v: attention(q, k, v, tf_qk, tf.linalg.matmul))
tvm_attention = tf.function(lambda q, k, v: attention(q, k, v, q_kt, p_v))

rng = np.random.default_rng(0)
q, k, v = (tf.constant(rng.standard_normal(s).astype(np.float32))
           for s in [(BH, Q_LEN, D), (BH, KV_LEN, D), (BH, KV_LEN, D)])  # fmt: skip
np.testing.assert_allclose(tvm_attention(q, k, v), tf_attention(q, k, v), rtol=1e-4, atol=1e-5)
print("attention with TVM matmuls matches TF")

# %%
# Timing
# ------
# The median of several runs of 200 calls each, in the same process. These are
# untuned kernels (tftvm's default CPU schedule); tutorial 6 tunes them with
# MetaSchedule, and ``benchmarks/attention.py`` measures every NMT shape tuned.


def median_us(f, calls=200, repeats=5):
    f(q, k, v)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            f(q, k, v)
        times.append((time.perf_counter() - start) / calls * 1e6)
    return float(np.median(times))


tf_us, tvm_us = median_us(tf_attention), median_us(tvm_attention)
print(f"one decoder step of attention: TF {tf_us:.0f} µs, TF + TVM matmuls {tvm_us:.0f} µs "
      f"(ratio {tvm_us / tf_us:.2f}, untuned)")  # fmt: skip

# %%
# What you should see: the two signatures, "attention with TVM matmuls matches
# TF", and the two timings. Both include ``tf.function``'s call overhead (about
# 0.3 ms here), which is the same for both.
