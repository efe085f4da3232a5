"""tftvm.check: one call of an op checked eagerly, in tf.function, under jit_compile, from a
SavedModel, its shape function and its gradient; a broken op fails the right line."""
import numpy as np
import pytest
import tensorflow as tf
import tftvm
from tvm import te


def silu(grad="auto"):
    n = te.var("n")
    x = te.placeholder((n, 4), "float32", name="x")
    y = te.compute((n, 4), lambda i, j: x[i, j] * te.sigmoid(x[i, j]), name="y")
    return tftvm.op([x], [y], name="silu", grad=grad)


def test_a_correct_op_passes_every_check(rng):
    report = tftvm.check(silu(), rng.standard_normal((3, 4)).astype(np.float32))
    assert report.passed, report
    assert [r.check for r in report.results] == ["shape function", "tf.function", "jit_compile", "SavedModel", "gradient"]
    assert "declared vs numeric" in str(report)


@pytest.mark.no_op_check  # its gradient is wrong on purpose
def test_a_wrong_declared_gradient_fails_the_gradient_check(rng):
    op = silu(grad=lambda x, y, dy: dy * 2.0)  # not silu's derivative
    report = tftvm.check(op, rng.standard_normal((3, 4)).astype(np.float32), raise_on_failure=False)
    failed = [r.check for r in report.results if not r.passed]
    assert failed == ["gradient"], report
    with pytest.raises(AssertionError, match="FAIL gradient"):
        tftvm.check(op, rng.standard_normal((3, 4)).astype(np.float32))


def test_several_outputs_integers_and_no_gradient(rng):
    n = te.var("n")
    x = te.placeholder((n,), "int32", name="x")
    twice = te.compute((n,), lambda i: x[i] * 2, name="twice")
    ends = te.compute((1,), lambda _: x[0] + x[n - 1], name="ends")
    op = tftvm.op([x], [twice, ends], name="twice_and_ends")
    report = tftvm.check(op, rng.integers(-5, 5, 7).astype(np.int32))
    assert report.passed and "no gradient declared" in str(report), report


def test_the_suites_shared_ops_pass_check_with_auto_gradients(rng):
    """The conftest ops (several outputs, a shared symbolic dim, a reduction) with grad='auto'."""
    from conftest import make_add_bias, make_matmul

    add_bias = make_add_bias(width=8, name="add_bias_checked", grad="auto")
    report = tftvm.check(add_bias, rng.standard_normal((3, 8)).astype(np.float32), rng.standard_normal(8).astype(np.float32))
    assert report.passed, report
    matmul = make_matmul(name="matmul_checked", grad="auto")
    report = tftvm.check(matmul, rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal((5, 2)).astype(np.float32))
    assert report.passed, report


def test_without_inputs_check_makes_them_from_the_signature():
    """Symbolic dims get distinct sizes (3, 4, ...), and a scalar that sets a dim its value."""
    from conftest import make_matmul
    from tvm import tirx

    report = tftvm.check(make_matmul(name="matmul_sampled", grad="auto"))
    assert report.passed and "predicts (3, 5)" in str(report), report  # n=3, k=4, m=5
    n = tirx.Var("n", "int64")
    x = te.placeholder((n * 4,), "float32", name="x")
    rows = te.compute((n, 4), lambda i, j: x[i * 4 + j] * 2.0, name="rows")
    report = tftvm.check(tftvm.op(te.create_prim_func([n, x, rows]), name="rows_sampled"))
    assert report.passed and "predicts (3, 4)" in str(report), report
