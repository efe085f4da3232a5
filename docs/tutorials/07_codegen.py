"""
From codegen to a C++ op you own
================================

``tftvm codegen`` writes a small standalone project for one TVM function: a
named TF op in readable C++ (``REGISTER_OP``, a shape function, an
``OpKernel`` that calls TVM), the compiled TVM library, build files and a
test. Build it with g++, and the op runs in any TF process, including C++
servers, with no tftvm installed.
"""

# %%
# A kernel file
# -------------
# ``codegen`` takes a tftvm op; from the command line it takes ``FILE.py:NAME``.
# Here the file defines a fused bias + GELU (tanh form) over a symbolic batch,
# and its NumPy reference, which the generated test will check against.
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import tensorflow as tf

work = Path(tempfile.mkdtemp(prefix="codegen-"))
(work / "my_kernels.py").write_text('''
import numpy as np
import tftvm
from tvm import te

n = te.var("n")
X = te.placeholder((n, 128), "float32", name="X")
bias = te.placeholder((128,), "float32", name="bias")
Y = te.compute((n, 128), lambda i, j: X[i, j] + bias[j], name="Y")
GELU = te.compute(
    (n, 128),
    lambda i, j: 0.5 * Y[i, j] * (1.0 + te.tanh(0.7978845608 * (Y[i, j] + 0.044715 * Y[i, j] * Y[i, j] * Y[i, j]))),
    name="gelu")
bias_gelu = tftvm.op([X, bias], [GELU], name="bias_gelu")


def bias_gelu_numpy(x, bias):
    y = x + bias
    return 0.5 * y * (1.0 + np.tanh(0.7978845608 * (y + 0.044715 * y**3)))
''')

# %%
# Generate the project
# --------------------
# The same as ``tftvm.codegen(bias_gelu, out, reference=bias_gelu_numpy)`` in Python.
project = work / "bias_gelu"
subprocess.run([sys.executable, "-m", "tftvm.cli", "codegen", f"{work}/my_kernels.py:bias_gelu", "--out", str(project),
                "--reference", "bias_gelu_numpy"], check=True)  # fmt: skip
print(sorted(p.name for p in project.iterdir()))

# %%
# Read the op
# -----------
# The part that is specific to this op: its shape function and interface.
source = (project / "bias_gelu_op.cc").read_text()
start = source.index("absl::Status BiasGeluShape")
print(source[start:source.index(")doc\");", start) + 7])

# %%
# Build and test it
# -----------------
# ``build.sh`` needs only g++ (and the TF and TVM Python packages, for their
# headers and flags); it takes about 20 s. The generated test loads the op
# with plain TensorFlow and compares it with the NumPy reference.
subprocess.run([str(project / "build.sh")], check=True, env={**os.environ, "PYTHON": sys.executable})
test = subprocess.run([sys.executable, str(project / "test_bias_gelu.py")], capture_output=True, text=True)
print(test.stdout.strip())
assert test.returncode == 0, test.stderr[-2000:]

# %%
# Use it
# ------
# A named op with its own Python wrapper. It is an ordinary custom op from here
# on: ``tf.function``, SavedModels (with the library loaded first), TF Serving's
# ``--custom_op_paths``.
bias_gelu = tf.load_op_library(str(project / "bias_gelu_op.so")).bias_gelu
x = np.random.default_rng(0).standard_normal((3, 128)).astype(np.float32)
b = np.linspace(-1, 1, 128).astype(np.float32)
y = bias_gelu(x, b)
np.testing.assert_allclose(y, tf.nn.gelu(x + b, approximate=True), rtol=1e-4, atol=1e-5)
print("BiasGelu from the generated library matches tf.nn.gelu:", y.shape)

# %%
# What you should see: the project's files, the op's shape function and
# ``REGISTER_OP`` block, the generated test's "3 tests passed", and the op
# matching ``tf.nn.gelu``. The project's README explains each file and what to
# change for a new op.
