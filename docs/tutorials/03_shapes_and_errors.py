"""
Symbolic shapes, several outputs, and errors
============================================

One TVM function with symbolic dims and two outputs becomes one TF op; TF
infers its output shapes, and bad input gets a TF error that names the
argument and the shape it expected.
"""

# %%
# A function with two outputs
# ---------------------------
# Row-wise mean and variance of an ``(rows, cols)`` matrix. ``rows`` and ``cols``
# are symbolic; both results have shape ``(rows,)``.
import numpy as np
import tensorflow as tf
import tftvm
from tvm import te

rows, cols = te.var("rows"), te.var("cols")
X = te.placeholder((rows, cols), "float32", name="X")
k = te.reduce_axis((0, cols), "k")
total = te.compute((rows,), lambda i: te.sum(X[i, k], axis=k), name="total")
mean = te.compute((rows,), lambda i: total[i] / cols.astype("float32"), name="mean")
k2 = te.reduce_axis((0, cols), "k2")
squares = te.compute((rows,), lambda i: te.sum((X[i, k2] - mean[i]) * (X[i, k2] - mean[i]), axis=k2),
                     name="squares")  # fmt: skip
var = te.compute((rows,), lambda i: squares[i] / cols.astype("float32"), name="var")
moments = tftvm.op([X], [mean, var], name="row_moments")
print(moments)

x = np.random.default_rng(0).standard_normal((6, 50)).astype(np.float32)
m, v = moments(x)
tf_m, tf_v = tf.nn.moments(tf.constant(x), axes=[1])
np.testing.assert_allclose(m, tf_m, rtol=1e-5, atol=1e-6)
np.testing.assert_allclose(v, tf_v, rtol=1e-4, atol=1e-6)
print("mean and variance match tf.nn.moments for", x.shape)

# %%
# Shapes at graph-build time
# --------------------------
# With ``rows`` unknown and ``cols`` known, both outputs are ``(None,)``; with
# a static input, TF knows them exactly.
for spec in ([None, 50], [6, 50]):
    f = tf.function(moments).get_concrete_function(tf.TensorSpec(spec, tf.float32))
    print(f"input {spec} -> outputs", [o.shape.as_list() for o in f.structured_outputs])

# %%
# Shapes that must agree
# ----------------------
# A dim can be an expression of the others. Here ``B`` must have ``2 * n`` rows:
# the op checks it, at graph-build time when TF knows the shapes and always
# when it runs.
n = te.var("n")
A = te.placeholder((n,), "float32", name="A")
B = te.placeholder((2 * n,), "float32", name="B")
C = te.compute((n,), lambda i: A[i] + B[2 * i] + B[2 * i + 1], name="C")
pairs = tftvm.op([A, B], [C], name="add_pairs")
print(pairs)
print("add_pairs:", pairs(np.ones(3, np.float32), np.arange(6, dtype=np.float32)).numpy())

# %%
# What the errors look like
# -------------------------
# Each bad call raises before TVM runs; none takes the process down.
bad_calls = {
    "wrong dtype": lambda: moments(np.ones((2, 3), np.int32)),
    "wrong rank": lambda: moments(np.ones(3, np.float32)),
    "disagreeing dims": lambda: pairs(np.ones(3, np.float32), np.ones(5, np.float32)),
    "wrong argument count": lambda: pairs(np.ones(3, np.float32)),
}
for what, call in bad_calls.items():
    try:
        call()
    except (TypeError, tf.errors.InvalidArgumentError) as err:
        message = err.message if isinstance(err, tf.errors.OpError) else str(err)
        message = message.split("}} ", 1)[-1].split(" [Op:")[0]  # drop TF's eager-call decoration
        print(f"{what}: {type(err).__name__}: {message}")
    else:
        raise AssertionError(f"{what} was accepted")

# %%
# What you should see: the two signatures, the shapes ``[None]`` and ``[6]``,
# ``add_pairs: [ 2.  6. 10.]``, and four errors, each naming the argument.
