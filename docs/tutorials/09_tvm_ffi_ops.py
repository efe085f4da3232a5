"""
Your own C++ kernel as a TF op, through tvm-ffi
===============================================

tvm-ffi is the ABI TVM's kernels use; a C++ function written against it (and the kernel
libraries that ship tvm-ffi functions) becomes a TF op the same way a TVM kernel does:
TF's shape inference from a signature, zero-copy tensors, errors as TF errors, gradients,
SavedModel. No TF C++ API, no TVM compiler.

Run it: ``python docs/tutorials/09_tvm_ffi_ops.py`` (it compiles a small C++ file with
``g++``, a few seconds).
"""

# %%
# 1. Write the kernel against tvm-ffi
# -----------------------------------
# The convention is TVM's destination-passing style: inputs first, then the outputs,
# which TF allocates from the shapes in the signature. ``TVM_FFI_THROW(ValueError)``
# reaches the caller as a TF ``InvalidArgumentError``.
import subprocess
import sys
import tempfile

import numpy as np
import tensorflow as tf
import tftvm
import tvm_ffi
import tvm_ffi.cpp

SOURCE = r"""
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <cmath>

// Leaky ReLU with slope 0.1: out = x > 0 ? x : 0.1 * x
void leaky_relu(tvm::ffi::TensorView x, tvm::ffi::TensorView out) {
  int64_t n = 1;
  for (int d = 0; d < x.ndim(); ++d) n *= x.size(d);
  const float* in = static_cast<const float*>(x.data_ptr());
  float* o = static_cast<float*>(out.data_ptr());
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(in[i])) TVM_FFI_THROW(ValueError) << "leaky_relu: NaN at element " << i;
    o[i] = in[i] > 0 ? in[i] : 0.1f * in[i];
  }
}
"""

# %%
# 2. Build a library and load it as an op
# ---------------------------------------
# ``tvm_ffi.cpp.build_inline`` compiles the source and exports the listed functions; the
# signature names each tensor with its dtype and dims (strings are symbolic sizes).
build_dir = tempfile.mkdtemp()
library = tvm_ffi.cpp.build_inline("leaky_relu_lib", cpp_sources=SOURCE, functions=["leaky_relu"],
                                   build_directory=build_dir)  # fmt: skip
signature = ([("x", "float32", ["n", "c"])], [("out", "float32", ["n", "c"])])
leaky = tftvm.load_op(library, "leaky_relu", signature=signature,
                      grad=lambda x, out, d_out: d_out * tf.where(x > 0, 1.0, 0.1))  # fmt: skip
print(leaky)

x = tf.random.normal([4, 8], seed=1)
want = tf.nn.leaky_relu(x, alpha=0.1)
np.testing.assert_allclose(leaky(x), want, rtol=1e-6)
np.testing.assert_allclose(tf.function(leaky)(x), want, rtol=1e-6)
print("eager and tf.function match tf.nn.leaky_relu")

# %%
# 3. Errors and gradients
# -----------------------
# The signature is checked before the kernel runs; the kernel's own error comes back
# with its message.
try:
    leaky(np.array([[1.0, np.nan]], np.float32))
except tf.errors.InvalidArgumentError as err:
    print("the kernel refused:", err.message.split(" [Op:")[0])
with tf.GradientTape() as tape:
    tape.watch(x)
    y = tf.reduce_sum(leaky(x) * 3.0)
np.testing.assert_allclose(tape.gradient(y, x), 3.0 * np.where(x > 0, 1.0, 0.1), rtol=1e-6)
print("the gradient matches")

# %%
# 4. Save it; serve it elsewhere
# ------------------------------
# The graph node carries the library's bytes, so a SavedModel runs in a process that
# has neither the source nor the build directory, only tftvm.
module = tf.Module()
module.f = tf.function(leaky, input_signature=[tf.TensorSpec([None, 8], tf.float32)])
saved = tempfile.mkdtemp()
tf.saved_model.save(module, saved)
serve = (
    "import sys, numpy as np, tensorflow as tf, tftvm\n"
    "f = tf.saved_model.load(sys.argv[1]).f\n"
    "print(f(tf.constant(np.full((2, 8), -2.0, np.float32))).numpy()[0, 0])\n"
)
out = subprocess.run([sys.executable, "-c", serve, saved], capture_output=True, text=True, check=True).stdout
assert abs(float(out.strip().splitlines()[-1]) + 0.2) < 1e-6, out
print("served in a fresh process: leaky_relu(-2) =", out.strip().splitlines()[-1])

# %%
# 5. A function without a library file
# ------------------------------------
# A function of a loaded module (``tvm_ffi.cpp.load_inline`` returns one) is an op too,
# for this process: a graph holding it cannot run elsewhere, and says so.
functions = tvm_ffi.load_module(library)
in_process = tftvm.op(functions, func_name="leaky_relu", signature=signature)
np.testing.assert_allclose(in_process(x), want, rtol=1e-6)
print("a tvm-ffi C++ kernel runs as a TF op")

# %%
# What you should see: the op's signature (``leaky_relu(x: float32[n, c]) -> (float32[n, c])``),
# the matches against ``tf.nn.leaky_relu``, the kernel's own refusal of a NaN as a TF error
# (``ValueError: leaky_relu: NaN at element 1``), the gradient check, ``leaky_relu(-2) = -0.2``
# from the fresh process, and the closing line.
