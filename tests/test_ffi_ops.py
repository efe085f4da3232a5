"""Any tvm-ffi function as a TF op: C++ written against tvm-ffi (no TVM compiler involved),
as a library (`tvm_ffi.cpp.build_inline` -> `tftvm.load_op`) or a bare function of a loaded
module (`tftvm.op(module, func_name=..., signature=...)`)."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
import tftvm
import tvm_ffi
import tvm_ffi.cpp

SOURCE = r"""
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <cmath>

// out = 2 * x + y, elementwise; a NaN in x is refused, as a kernel checks its input.
void axpy(tvm::ffi::TensorView x, tvm::ffi::TensorView y, tvm::ffi::TensorView out) {
  int64_t n = 1;
  for (int d = 0; d < x.ndim(); ++d) n *= x.size(d);
  const float* xp = static_cast<const float*>(x.data_ptr());
  const float* yp = static_cast<const float*>(y.data_ptr());
  float* op = static_cast<float*>(out.data_ptr());
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(xp[i])) TVM_FFI_THROW(ValueError) << "axpy: x has a NaN at element " << i;
    op[i] = 2 * xp[i] + yp[i];
  }
}
"""
SIGNATURE = ([("x", "float32", ["n", "m"]), ("y", "float32", ["n", "m"])], [("out", "float32", ["n", "m"])])


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    build = tmp_path_factory.mktemp("ffi_build")
    return tvm_ffi.cpp.build_inline("tftvm_test_axpy", cpp_sources=SOURCE, functions=["axpy"],
                                    build_directory=str(build))  # fmt: skip


def inputs(rng, shape=(3, 5)):
    return rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)


def test_a_tvm_ffi_library_is_an_op_eagerly_and_in_tf_function_at_any_shape(library, rng):
    axpy = tftvm.load_op(library, "axpy", signature=SIGNATURE)
    traced = tf.function(axpy)
    for shape in [(3, 5), (1, 7), (4, 0)]:
        x, y = inputs(rng, shape)
        np.testing.assert_allclose(axpy(x, y), 2 * x + y, rtol=1e-6)
        np.testing.assert_allclose(traced(x, y), 2 * x + y, rtol=1e-6)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="must have shape"):
        axpy(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32))


def test_an_error_the_cpp_function_raises_is_a_tf_error_with_its_message(library):
    axpy = tftvm.load_op(library, "axpy", signature=SIGNATURE)
    x = np.ones((2, 2), np.float32)
    x[1, 0] = np.nan
    with pytest.raises(tf.errors.InvalidArgumentError, match="x has a NaN at element 2"):
        axpy(x, np.ones((2, 2), np.float32))


def test_a_bare_function_of_a_loaded_module_is_an_op_with_a_gradient(library, rng):
    module = tvm_ffi.load_module(library)
    by_name = tftvm.op(module, func_name="axpy", signature=SIGNATURE)
    bare = tftvm.op(module.get_function("axpy"), signature=SIGNATURE, name="axpy2",
                    grad=lambda x, y, out, d_out: (2 * d_out, d_out))  # fmt: skip
    x, y = inputs(rng)
    np.testing.assert_allclose(by_name(x, y), 2 * x + y, rtol=1e-6)
    np.testing.assert_allclose(tf.function(bare)(x, y), 2 * x + y, rtol=1e-6)
    xv, yv = tf.Variable(x), tf.Variable(y)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(bare(xv, yv) ** 2)
    dx, dy = tape.gradient(loss, [xv, yv])
    np.testing.assert_allclose(dx, 4 * (2 * x + y), rtol=1e-5)
    np.testing.assert_allclose(dy, 2 * (2 * x + y), rtol=1e-5)


def test_making_a_tvm_ffi_op_without_what_it_needs_says_what_is_missing(library):
    module = tvm_ffi.load_module(library)
    with pytest.raises(TypeError, match="signature="):
        tftvm.op(module.get_function("axpy"))
    with pytest.raises(ValueError, match="func_name='nope'"):
        tftvm.op(module, func_name="nope", signature=SIGNATURE)
    bare = tftvm.op(module.get_function("axpy"), signature=SIGNATURE)
    with pytest.raises(TypeError, match="no library to save"):
        bare.save("/tmp/never_written.so")


RELOAD = """
import sys, numpy as np, tensorflow as tf
import tftvm  # registers TvmCall
loaded = tf.saved_model.load(sys.argv[1])
x = np.arange(6, dtype=np.float32).reshape(2, 3)
try:
    print("result", loaded.f(tf.constant(x), tf.constant(x)).numpy().ravel().tolist())
except tf.errors.NotFoundError as err:
    print("not found:", err.message)
"""


def _saved(op, path):
    module = tf.Module()
    module.f = tf.function(op, input_signature=[tf.TensorSpec([None, None], tf.float32)] * 2)
    tf.saved_model.save(module, str(path))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(RELOAD), str(path)], capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_a_library_op_in_a_saved_model_runs_in_a_fresh_process(library, tmp_path):
    """The graph node embeds the library: the reloading process needs neither the build
    directory nor the C++ source, only tftvm's TvmCall."""
    out = _saved(tftvm.load_op(library, "axpy", signature=SIGNATURE), tmp_path / "lib")
    x = np.arange(6, dtype=np.float32)
    assert f"result {(3 * x).tolist()}" in out, out


def test_a_bare_function_op_in_a_saved_model_fails_elsewhere_with_a_clear_error(library, tmp_path):
    bare = tftvm.op(tvm_ffi.load_module(library).get_function("axpy"), signature=SIGNATURE)
    out = _saved(bare, tmp_path / "bare")
    assert "not found:" in out and "not registered in this process" in out and "tftvm.load_op" in out, out


def test_tvm_ffi_ops_compile_under_jit_compile(library, rng):
    """Library and bare-function ops alike become XLA custom calls."""
    x, y = inputs(rng)
    for axpy in (tftvm.load_op(library, "axpy", signature=SIGNATURE),
                 tftvm.op(tvm_ffi.load_module(library).get_function("axpy"), signature=SIGNATURE)):  # fmt: skip
        jitted = tf.function(lambda a, b: axpy(a, b) - 1.0, jit_compile=True)
        np.testing.assert_allclose(jitted(x, y), 2 * x + y - 1.0, rtol=1e-6)
        assert 'custom_call_target="tftvm_call"' in jitted.experimental_get_compiler_ir(x, y)(stage="hlo")
    bad = x.copy()
    bad[0, 1] = np.nan
    with pytest.raises(tf.errors.InvalidArgumentError, match="x has a NaN at element 1"):
        jitted(bad, y)


def test_tftvm_check_passes_for_library_and_bare_function_ops(library, rng):
    x, y = inputs(rng, (2, 3))
    for op in (tftvm.load_op(library, "axpy", signature=SIGNATURE, grad=lambda x, y, out, d: (2 * d, d)),
               tftvm.op(tvm_ffi.load_module(library).get_function("axpy"), signature=SIGNATURE)):  # fmt: skip
        report = tftvm.check(op, x, y)
        assert report.passed, report
