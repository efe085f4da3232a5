"""
Gradients, Keras training, and SavedModels
==========================================

A TVM matmul with TVM backward kernels becomes a trainable op; a Keras layer
built on it trains like ``tf.matmul`` (same losses), and ``model.export()``
writes a SavedModel that a fresh process serves after ``import tftvm`` (the TVM
code travels inside the SavedModel; nothing is recompiled there).
"""

# %%
# 1. A matmul and its two backward matmuls
# ----------------------------------------
# All three are TVM kernels with symbolic shapes. ``grad=`` gets the forward
# inputs, the outputs, then the upstream gradients, and returns one gradient
# per input; here it calls the two backward ops. (``grad="auto"`` derives the
# backward from the TE compute instead.)
import subprocess
import sys
import tempfile

import keras
import numpy as np
import tensorflow as tf
import tftvm
from tvm import te


def matmul_op(name, a_shape, b_shape, out_shape, element, extent):
    A = te.placeholder(a_shape, "float32", name="A")
    B = te.placeholder(b_shape, "float32", name="B")
    r = te.reduce_axis((0, extent), "r")
    C = te.compute(out_shape, lambda i, j: te.sum(element(A, B, i, j, r), axis=r), name="C")
    return tftvm.op([A, B], [C], name=name)


n, k, m = te.var("n"), te.var("k"), te.var("m")
grad_a = matmul_op("dA", (n, m), (k, m), (n, k), lambda a, b, i, j, r: a[i, r] * b[j, r], m)  # dC·Bᵀ
grad_b = matmul_op("dB", (n, k), (n, m), (k, m), lambda a, b, i, j, r: a[r, i] * b[r, j], n)  # Aᵀ·dC
A = te.placeholder((n, k), "float32", name="A")
B = te.placeholder((k, m), "float32", name="B")
r = te.reduce_axis((0, k), "r")
C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
tvm_matmul = tftvm.op([A, B], [C], name="tvm_matmul",
                      grad=lambda a, b, c, dc: (grad_a(dc, b), grad_b(a, dc)))  # fmt: skip


# %%
# 2. A Keras layer that trains
# ----------------------------
# The layer calls the TVM matmul (or ``tf.matmul``, to compare); its config is
# plain data, so the model saves and loads like any Keras model. The same seed
# and data train both versions: their losses agree.
@keras.saving.register_keras_serializable("tutorial")
class TvmDense(keras.layers.Layer):
    def __init__(self, units, use_tvm=True, **kwargs):
        super().__init__(**kwargs)
        self.units, self.use_tvm = units, use_tvm

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units), initializer="glorot_uniform")
        self.bias = self.add_weight(shape=(self.units,), initializer="zeros")

    def call(self, x):
        matmul = tvm_matmul if self.use_tvm else tf.matmul
        return matmul(x, self.kernel) + self.bias

    def get_config(self):
        return {**super().get_config(), "units": self.units, "use_tvm": self.use_tvm}


def train(use_tvm, x, y):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), TvmDense(16, use_tvm), keras.layers.ReLU(),
                              TvmDense(1, use_tvm)])  # fmt: skip
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    losses = model.fit(x, y, batch_size=16, epochs=5, shuffle=False, verbose=0).history["loss"]
    return model, losses


rng = np.random.default_rng(0)
x = rng.standard_normal((64, 8)).astype(np.float32)
y = (x @ rng.standard_normal((8, 1))).astype(np.float32)
model, tvm_losses = train(True, x, y)
_, tf_losses = train(False, x, y)
print("epoch losses, TVM matmul:", np.round(tvm_losses, 5))
print("epoch losses, tf.matmul: ", np.round(tf_losses, 5))
np.testing.assert_allclose(tvm_losses, tf_losses, rtol=1e-4)

# %%
# 3. Export a SavedModel and serve it from a fresh process
# --------------------------------------------------------
# The fresh process imports only TF, NumPy and tftvm (which registers the op).
out_dir = tempfile.mkdtemp()
model.export(f"{out_dir}/model", verbose=False)
np.save(f"{out_dir}/x.npy", x[:4])
serve = f"""
import numpy as np, tensorflow as tf, tftvm   # tftvm registers the TvmCall op
m = tf.saved_model.load("{out_dir}/model")
print(m.serve(tf.constant(np.load("{out_dir}/x.npy"))).numpy().ravel())
"""
served = subprocess.run([sys.executable, "-c", serve], capture_output=True, text=True, check=True)
print("served in a fresh process:", served.stdout.strip())
print("the trained model here:    ", model(x[:4]).numpy().ravel())

# %%
# What you should see: two identical rows of epoch losses, and the same four
# predictions from the fresh process and from the trained model.
