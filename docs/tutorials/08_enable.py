"""
Speed up an existing script with two lines: ``tftvm.enable()``
==============================================================

``tftvm.enable()`` registers nothing new in your code: it turns on a pass in TF's own graph
optimization registry. From then on, every graph TF instantiates (a ``tf.function``'s first
call, Keras ``predict``, ``fit`` and ``evaluate``, a loaded SavedModel's signatures) goes
through the same pipeline as ``tftvm.optimize``: the parts TVM can run become TvmCall ops,
the rest stays in TF, and variables stay variables, so training works too. Setting
``TFTVM_ENABLE=1`` does the same for a script you do not want to touch at all.
"""

# %%
# An existing script
# ------------------
# A Keras model, trained and used for prediction as usual.
import keras
import numpy as np
import tftvm  # line 1

keras.utils.set_random_seed(0)
x = np.random.default_rng(0).standard_normal((256, 32)).astype(np.float32)
y = np.random.default_rng(1).standard_normal((256, 4)).astype(np.float32)


def script():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(64, activation="gelu"), keras.layers.Dense(4)])  # fmt: skip
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    history = model.fit(x, y, batch_size=32, epochs=2, verbose=0, shuffle=False)
    return history.history["loss"], model.predict(x, verbose=0)


losses_tf, predictions_tf = script()

# %%
# The same script with the pass on
# --------------------------------
# ``keep_faster=False`` keeps every cluster in TVM even where TF times it as fast: this
# model is small enough that the safety net (the default) might keep it in TF.
tftvm.enable(keep_faster=False)  # line 2
losses_tvm, predictions_tvm = script()
tftvm.disable()

np.testing.assert_allclose(losses_tvm, losses_tf, rtol=1e-5)
np.testing.assert_allclose(predictions_tvm, predictions_tf, rtol=1e-4, atol=1e-5)
print("with tftvm.enable(), fit and predict match TF")

# %%
# What the pass did
# -----------------
# One entry per graph: what ran in TVM, and why the rest (reading and updating the
# variables, the input pipeline) stayed in TF.
print(tftvm.enabled_report())

# %%
# What you should see: the two loss histories and predictions match, and a report for
# Keras' training loop (``multi_step_on_iterator``: the forward and backward matmuls in TVM,
# ``AssignSubVariableOp`` and ``ReadVariableOp`` in TF) and for its prediction step
# (``one_step_on_data``), each headed by the kernels it compiled and found in the kernel
# cache (a second run of this tutorial compiles none). Run the script unchanged with
# ``TFTVM_ENABLE=1`` and without line 2 for the same result.
