"""
Your first TVM op in TensorFlow
===============================

A TVM kernel written in a few lines of TE becomes a TF op that runs eagerly and
inside ``tf.function``, with TF's own shape inference.

Set up once (from a clone of tftvm): ``pip install -e .``, then run this file:
``python docs/tutorials/01_first_op.py``. It finishes in a few seconds.
"""

# %%
# 1. Describe the computation
# ---------------------------
# TVM's tensor expressions (TE) say *what* to compute, element by element.
# ``n`` is a symbolic size: the op will take vectors of any length. This is
# SiLU (``x * sigmoid(x)``), an activation that TF has as ``tf.nn.silu``.
import numpy as np
import tensorflow as tf
import tftvm
from tvm import te

n = te.var("n")
x = te.placeholder((n,), "float32", name="x")
y = te.compute((n,), lambda i: x[i] * te.sigmoid(x[i]), name="y")

# %%
# 2. Make it a TF op
# ------------------
# ``tftvm.op`` compiles the function with TVM (for this CPU, with a default
# schedule: a parallel outer loop, a vectorized inner one) and returns a
# callable TF op. Printing it shows the signature tftvm read from the buffers.
silu = tftvm.op([x], [y], name="silu")
print(silu)

# %%
# 3. Call it eagerly
# ------------------
# It takes TF tensors (or NumPy arrays) and returns a TF tensor; TF's buffers
# go to TVM without copies.
a = tf.random.normal([1000], seed=1)
out = silu(a)
expected = tf.nn.silu(a)
np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
print("eager:", out.shape, out.dtype.name, "max |tftvm - tf| =", float(tf.reduce_max(tf.abs(out - expected))))

# %%
# 4. Use it in a ``tf.function``
# ------------------------------
# In a graph the op is one node. Its shape function gives the output shape
# before anything runs: here ``(None,)``, the symbolic ``n``.


@tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
def model(t):
    return silu(t) * 2.0 + 1.0


print("graph output:", model.get_concrete_function().structured_outputs)
np.testing.assert_allclose(model(a), expected * 2.0 + 1.0, rtol=1e-5, atol=1e-6)

# %%
# What you should see: the op's signature ``silu(x: float32[n]) -> (float32[n])``,
# an eager result equal to ``tf.nn.silu`` to float32 rounding, and a graph
# output of shape ``(None,)``. Next: tutorial 3 shows what happens on bad input,
# tutorial 4 makes an op trainable.
print("silu works eagerly and in tf.function, and matches tf.nn.silu")
