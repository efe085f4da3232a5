"""Bad input gives a clear Python exception or TF error, never a crash."""
import hashlib

import numpy as np
import pytest
import tensorflow as tf
import tftvm
from tftvm import native
from tvm.script import tirx as T


@T.prim_func
def checked_copy(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
    for i in range(4):
        assert A[i] >= T.float32(0), "A must be non-negative"
        B[i] = A[i]


def test_wrong_arity(add_bias):
    with pytest.raises(TypeError, match=r"takes 2 arguments \(A, B\), got 1"):
        add_bias(np.zeros((1, 64), np.float32))
    with pytest.raises(TypeError, match="got 3"):
        add_bias(np.zeros((1, 64), np.float32), np.zeros(64, np.float32), 1)


def test_wrong_dtype_tensor(add_bias):
    with pytest.raises(TypeError, match=r"argument 'B' \(input 1\) must have dtype float32, got float64"):
        add_bias(tf.zeros((1, 64)), tf.zeros(64, tf.float64))


def test_wrong_dtype_numpy(add_bias):
    with pytest.raises(TypeError, match=r"argument 'A' \(input 0\) must have dtype float32, got int32"):
        add_bias(np.zeros((1, 64), np.int32), np.zeros(64, np.float32))


def test_wrong_dtype_in_graph(add_bias):
    @tf.function
    def f(a, b):
        return add_bias(a, b)

    with pytest.raises(TypeError, match="must have dtype float32, got float16"):
        f(tf.zeros((1, 64), tf.float16), tf.zeros(64))


def test_non_tensor_argument(add_bias):
    with pytest.raises(TypeError, match=r"argument 'A' \(input 0\) must be a float32 tensor"):
        add_bias("not a tensor", np.zeros(64, np.float32))


def test_python_lists_convert(add_bias):
    y, s = add_bias([[1.0] * 64], [2.0] * 64)
    np.testing.assert_array_equal(s.numpy(), [192.0])


@pytest.mark.parametrize("make", [
    lambda: tf.ragged.constant([[1.0] * 64, [2.0] * 64]),
    lambda: tf.sparse.from_dense(tf.ones((2, 64))),
])  # fmt: skip
def test_composite_tensors_are_refused(add_bias, make):
    with pytest.raises(TypeError, match="must be a dense tensor"):
        add_bias(make(), np.zeros(64, np.float32))


def test_tvm_runtime_error_becomes_tf_error():
    op = tftvm.op(checked_copy)
    np.testing.assert_array_equal(op(np.arange(4, dtype=np.float32)).numpy(), np.arange(4))
    with pytest.raises(tf.errors.InternalError, match="TVM function 'checked_copy' failed: RuntimeError: A must be non-negative"):
        op(np.array([1, -1, 2, 3], np.float32))
    # The op and the process are still fine afterwards.
    np.testing.assert_array_equal(op(np.ones(4, np.float32)).numpy(), np.ones(4))


@T.prim_func
def copy4(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
    for i in range(4):
        B[i] = A[i]


def test_without_tvm_argument_checks_the_op_still_refuses_a_wrong_shape(tmp_path):
    """argument_checks=False takes TVM's checks out of the library (called directly, it takes a
    buffer of 8 for one of 4); the op's TF kernel refuses the wrong shape all the same, and a
    function's own asserts stay."""
    import tvm
    import tvm_ffi

    for checks in (True, False):
        op = tftvm.op(copy4, name=f"copy4_checks_{checks}", argument_checks=checks)
        library = tvm_ffi.load_module(str(op.kernel.save(tmp_path / f"copy4_{checks}.so")))
        a, b = tvm.runtime.tensor(np.arange(8, dtype=np.float32)), tvm.runtime.tensor(np.zeros(4, np.float32))
        if checks:
            with pytest.raises(Exception, match="expected 4"):
                library.get_function(op.kernel.func_name)(a, b)
        else:
            library.get_function(op.kernel.func_name)(a, b)
            np.testing.assert_array_equal(b.numpy(), np.arange(4))
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"argument 'A' \(input 0\) must have .*shape \[4\]"):
            op(np.arange(8, dtype=np.float32))
        np.testing.assert_array_equal(op(np.arange(4, dtype=np.float32)), np.arange(4))
    own = tftvm.op(checked_copy, name="checked_copy_no_argument_checks", argument_checks=False)
    with pytest.raises(tf.errors.InternalError, match="A must be non-negative"):
        own(np.array([1, -1, 2, 3], np.float32))


def raw_call(add_bias, **changes):
    attrs = dict(add_bias._tftvm_eager_attrs, **changes)
    return native.load().tvm_call([tf.zeros((2, 64)), tf.zeros(64)], **attrs)


def test_unknown_module_key_is_not_found(add_bias):
    with pytest.raises(tf.errors.NotFoundError, match="no TVM module with key"):
        raw_call(add_bias, key="ab" * 32)


def test_missing_function_is_not_found(add_bias):
    with pytest.raises(tf.errors.NotFoundError, match="has no function 'nope'"):
        raw_call(add_bias, func_name="nope")


def test_corrupt_embedded_module_is_an_error(add_bias):
    garbage = b"\x7fELF garbage"
    key = hashlib.sha256(garbage).hexdigest()
    with pytest.raises(tf.errors.NotFoundError, match="cannot load TVM module"):
        raw_call(add_bias, key=key, module=garbage)


def test_embedded_module_not_matching_its_key_is_refused(add_bias):
    tampered = bytearray(add_bias.kernel.library)
    tampered[len(tampered) // 2] ^= 0xFF
    with pytest.raises(tf.errors.NotFoundError, match="SHA-256 mismatch"):
        raw_call(add_bias, key="ef" * 32, module=bytes(tampered))


def test_malformed_spec_is_an_error(add_bias):
    with pytest.raises(tf.errors.InvalidArgumentError, match="malformed shape spec"):
        raw_call(add_bias, in_spec="n#A|v0 +,c64;B|c64")


def test_scalar_output_is_refused():
    @T.prim_func
    def bad(A: T.Buffer((4,), "float32"), s: T.float32):
        T.evaluate(0)

    with pytest.raises(ValueError, match="output 's' is a scalar"):
        tftvm.op(bad)


def test_num_outputs_out_of_range():
    with pytest.raises(ValueError, match="num_outputs=3 but the PrimFunc has 2"):
        tftvm.op(checked_copy, num_outputs=3)


def test_no_gradient_is_a_lookup_error(add_bias):
    x = tf.Variable(tf.ones((1, 64)))
    with tf.GradientTape() as tape:
        _, s = add_bias(x, tf.zeros(64))
    with pytest.raises(LookupError, match="tftvm op .add_bias. has no gradient"):
        tape.gradient(s, x)


def test_a_failing_compiler_is_a_build_error_naming_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("TFTVM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", "false")
    with pytest.raises(native.NativeBuildError, match="g\\+\\+ failed to build the tftvm bridge library:\nfalse "):
        native.build(force=True)
    # Nothing half-built is left where the next build or load would find it.
    assert [p.name for p in native.build_dir().iterdir()] == [".lock"]
