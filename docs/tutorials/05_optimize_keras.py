"""
Offload a whole Keras model with ``tftvm.optimize``
===================================================

``tftvm.optimize`` finds the parts of a model's graph that TVM can run, compiles
each into one fused TVM kernel, leaves the rest in TF, and reports what went
where; the result is a TF function that saves as a SavedModel.
"""

# %%
# A model with something TVM will not take
# ----------------------------------------
# A small CNN. ``tf.math.lgamma`` in the middle is outside tftvm's converter
# table, so the graph splits there: what comes before and after it runs in TVM,
# the lgamma stays in TF.
import tempfile

import keras
import numpy as np
import tensorflow as tf
import tftvm

keras.utils.set_random_seed(0)
inputs = keras.Input((16, 16, 3))
h = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
h = keras.layers.MaxPooling2D()(h)
h = keras.layers.GlobalAveragePooling2D()(h)
h = keras.layers.Lambda(lambda t: tf.math.lgamma(t + 1.0))(h)
outputs = keras.layers.Dense(4, activation="softmax")(keras.layers.Dense(16, activation="relu")(h))
model = keras.Model(inputs, outputs)

# %%
# Optimize it
# -----------
# ``input_signature`` fixes dtypes and ranks; ``None`` keeps the batch symbolic,
# so one compiled kernel serves every batch size.
fast = tftvm.optimize(model, input_signature=[tf.TensorSpec([None, 16, 16, 3], tf.float32)])
x = np.random.default_rng(0).standard_normal((5, 16, 16, 3)).astype(np.float32)
np.testing.assert_allclose(fast(x), model(x), rtol=1e-4, atol=1e-5)
print("optimized model matches the Keras model")

# %%
# Read the report
# ---------------
# How many graph nodes TVM runs, the clusters (each one TVM kernel), and, for
# every node left in TF, why.
print(fast.report())

# %%
# Save it, load it back
# ---------------------
# The TVM kernels travel inside the SavedModel; loading needs ``import tftvm``
# (which registers the op), not the compiler.
path = tempfile.mkdtemp() + "/fast"
tf.saved_model.save(fast, path)
loaded = tf.saved_model.load(path)
np.testing.assert_allclose(loaded(x), model(x), rtol=1e-4, atol=1e-5)
print("the saved and reloaded model matches too")

# %%
# What you should see: a report with two TVM clusters (before and after the
# lgamma) and ``Lgamma`` among the nodes that stayed in TF, with its reason.
