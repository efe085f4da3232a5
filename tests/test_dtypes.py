"""Every supported dtype end to end against NumPy, plus property tests over shapes."""
import functools

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf
import tftvm
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm import te, tirx

DTYPES = ["float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
          "uint8", "bool"]  # fmt: skip


def np_dtype(name):
    return ml_dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)


@functools.lru_cache(maxsize=None)
def combine_op(dtype: str):
    """C = A * 3 + B for numbers, C = A and not B for bool, over a symbolic 2-D shape."""
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), dtype, name="A")
    B = te.placeholder((n, m), dtype, name="B")
    if dtype == "bool":
        body = lambda i, j: tirx.Select(B[i, j], tirx.const(False, "bool"), A[i, j])  # noqa: E731
    else:
        body = lambda i, j: A[i, j] * tirx.const(3, dtype) + B[i, j]  # noqa: E731
    return tftvm.op([A, B], [te.compute((n, m), body, name="C")], name=f"combine_{dtype}")


def reference(a, b, dtype):
    if dtype == "bool":
        return a & ~b
    if dtype in ("float16", "bfloat16"):
        return (a.astype(np.float32) * 3 + b.astype(np.float32)).astype(np_dtype(dtype))
    return (a * np.array(3, dtype=a.dtype) + b).astype(a.dtype)


def make(rng, shape, dtype):
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        return rng.integers(info.min // 4, info.max // 4, shape, endpoint=True).astype(dtype)
    return rng.standard_normal(shape).astype(np_dtype(dtype))


def assert_matches(got, want, dtype):
    if dtype in ("float16", "bfloat16"):
        tol = 1e-2 if dtype == "float16" else 5e-2
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol)
    elif dtype.startswith("float"):  # LLVM may fuse a*3+b into one FMA
        tol = 1e-6 if dtype == "float32" else 1e-14
        np.testing.assert_allclose(got, want, rtol=tol, atol=10 * tol)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dtype_eager_and_graph(dtype, rng):
    op = combine_op(dtype)
    a, b = make(rng, (3, 5), dtype), make(rng, (3, 5), dtype)
    ta, tb = tf.constant(a, dtype=tf.as_dtype(dtype)), tf.constant(b, dtype=tf.as_dtype(dtype))
    out = op(ta, tb)
    assert out.dtype == tf.as_dtype(dtype)
    assert_matches(out.numpy(), reference(a, b, dtype), dtype)
    assert_matches(tf.function(op)(ta, tb).numpy(), reference(a, b, dtype), dtype)


@settings(max_examples=40, deadline=None)
@given(dtype=st.sampled_from(DTYPES), n=st.integers(0, 40), m=st.integers(0, 70),
       seed=st.integers(0, 2**31))  # fmt: skip
def test_property_random_shapes_and_dtypes(dtype, n, m, seed):
    rng = np.random.default_rng(seed)
    a, b = make(rng, (n, m), dtype), make(rng, (n, m), dtype)
    t = tf.as_dtype(dtype)
    out = combine_op(dtype)(tf.constant(a, dtype=t), tf.constant(b, dtype=t))
    assert out.shape == (n, m)
    assert_matches(out.numpy(), reference(a, b, dtype), dtype)


def test_unsupported_buffer_dtype_is_refused():
    A = te.placeholder((4,), "float8_e4m3fn", name="A")
    with pytest.raises(TypeError, match="dtype float8_e4m3fn"):
        tftvm.op([A], [te.compute((4,), lambda i: A[i], name="C")])
