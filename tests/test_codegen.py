"""`tftvm codegen`: the generated project builds (g++ and CMake) and its own test passes."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tftvm
from tvm.script import tirx as T

from conftest import make_add_bias, run_python


def add_bias_numpy(a, b):
    c = a + b
    return c, c.sum(axis=1)


@T.prim_func
def unflatten_pairs(a: T.handle, n: T.int64, s: T.float32, flip: T.bool, b: T.handle, c: T.handle):
    A = T.match_buffer(a, (n * 4,), "float32")
    B = T.match_buffer(b, (n, 4), "float32")
    C = T.match_buffer(c, (n // 2, n % 3 + 1), "int32")
    for i, j in T.grid(n, 4):
        B[i, j] = T.if_then_else(flip, A[(n - 1 - i) * 4 + j], A[i * 4 + j]) * s
    for i, j in T.grid(n // 2, n % 3 + 1):
        C[i, j] = T.Cast("int32", i * 10 + j)


def build_with_script(project):
    env = dict(os.environ, PYTHON=sys.executable)
    proc = subprocess.run([str(project / "build.sh")], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]


def run_generated_test(project, name):
    proc = subprocess.run([sys.executable, str(project / f"test_{name}.py")], capture_output=True,
                          text=True, timeout=300, cwd=project)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "3 tests passed" in proc.stdout


@pytest.fixture(scope="module")
def add_bias_project(tmp_path_factory):
    out = tmp_path_factory.mktemp("codegen") / "add_bias"
    tftvm.codegen(make_add_bias(), out, reference=add_bias_numpy)
    build_with_script(out)
    return out


@pytest.fixture(scope="module")
def add_bias_lib(add_bias_project):
    return tf.load_op_library(str(add_bias_project / "add_bias_op.so")).add_bias


def test_project_files(add_bias_project):
    names = {p.name for p in add_bias_project.iterdir()}
    assert {"add_bias_op.cc", "add_bias_kernel.so", "add_bias_op.so", "build.sh", "CMakeLists.txt",
            "test_add_bias.py", "add_bias_testdata.npz", "README.md"} <= names  # fmt: skip
    source = (add_bias_project / "add_bias_op.cc").read_text()
    assert 'REGISTER_OP("AddBias")' in source and '.Input("a: float")' in source
    assert "c->set_output(0, c->MakeShape({n, 64}));" in source
    # The test checks against the NumPy function, copied into it.
    assert "def add_bias_numpy(a, b):" in (add_bias_project / "test_add_bias.py").read_text()


def test_generated_test_passes(add_bias_project):
    run_generated_test(add_bias_project, "add_bias")


def test_generated_op_matches_numpy_and_tf_infers_its_shapes(add_bias_lib, rng):
    a = rng.standard_normal((7, 64)).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    c, d = add_bias_lib(a, b)
    want_c, want_d = add_bias_numpy(a, b)
    np.testing.assert_allclose(c, want_c, rtol=1e-6)
    np.testing.assert_allclose(d, want_d, rtol=1e-5, atol=1e-5)
    f = tf.function(add_bias_lib).get_concrete_function(tf.TensorSpec([None, 64]), tf.TensorSpec([64]))
    assert [o.shape.as_list() for o in f.structured_outputs] == [[None, 64], [None]]
    with pytest.raises(ValueError, match="64"):  # caught by the shape function, at graph-build time
        tf.function(add_bias_lib).get_concrete_function(tf.TensorSpec([None, 65]), tf.TensorSpec([64]))


def test_generated_op_errors_name_the_argument(add_bias_lib):
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"AddBias: argument 'b' \(input 1\) must have shape \[64\] \(with n=2\); got shape \[63\]"):  # fmt: skip
        add_bias_lib(np.zeros((2, 64), np.float32), np.zeros(63, np.float32))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"argument 'a' \(input 0\) must have shape \[n, 64\]"):
        add_bias_lib(np.zeros(64, np.float32), np.zeros(64, np.float32))
    with pytest.raises((TypeError, tf.errors.InvalidArgumentError), match="int32"):  # TF's own type check
        add_bias_lib(tf.zeros((2, 64), tf.int32), np.zeros(64, np.float32))


def test_generated_op_copies_only_misaligned_views_and_zero_fills_empty_reductions(add_bias_lib):
    base = np.arange(1 + 3 * 64, dtype=np.float32)
    view = base[1:].reshape(3, 64)
    assert view.ctypes.data % 64 != 0
    t = tf.experimental.dlpack.from_dlpack(view.__dlpack__())
    c, d = add_bias_lib(t, np.ones(64, np.float32))
    np.testing.assert_array_equal(c, view + 1)
    np.testing.assert_allclose(d, (view + 1).sum(axis=1))
    c, d = add_bias_lib(np.zeros((0, 64), np.float32), np.ones(64, np.float32))
    assert c.shape == (0, 64) and d.shape == (0,)


def test_missing_kernel_library_is_a_not_found_error(add_bias_project, tmp_path):
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    shutil.copy(add_bias_project / "add_bias_op.so", lonely)
    code = f"""
import numpy as np, tensorflow as tf
op = tf.load_op_library({str(lonely / "add_bias_op.so")!r}).add_bias
try:
    op(np.zeros((2, 64), np.float32), np.zeros(64, np.float32))
except tf.errors.NotFoundError as err:
    print("NotFound:", err.message)
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "cannot load the TVM library" in proc.stdout and "add_bias_kernel.so" in proc.stdout


def build_with_cmake(project):
    for args in (["-S", str(project), "-B", str(project / "build"), f"-DPython3_EXECUTABLE={sys.executable}"],
                 ["--build", str(project / "build")]):  # fmt: skip
        proc = subprocess.run(["cmake", *args], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_scalars_shape_expressions_and_recorded_outputs(tmp_path):
    """Scalar inputs (one sets `n`), dims n*4, n//2 and n%3+1, int32 and bool, no reference.
    Built with the project's CMakeLists (the add_bias project with its build.sh)."""
    op = tftvm.op(unflatten_pairs, num_outputs=2, name="unflatten_pairs")
    project = tftvm.codegen(op, tmp_path / "up")
    source = (project / "unflatten_pairs_op.cc").read_text()
    assert "TF_RETURN_IF_ERROR(c->MakeDimForScalarInput(1, &n));" in source
    assert "{n, 4}" in source and "{FloorDiv(n, 2), FloorMod(n, 3) + 1}" in source
    assert "recorded by tftvm" in (project / "test_unflatten_pairs.py").read_text()
    build_with_cmake(project)
    assert (project / "unflatten_pairs_op.so").exists()
    run_generated_test(project, "unflatten_pairs")
    code = f"""
import numpy as np, tensorflow as tf
op = tf.load_op_library({str(project / "unflatten_pairs_op.so")!r}).unflatten_pairs
x = np.arange(28, dtype=np.float32)
b, c = op(x, np.int64(7), np.float32(0.5), True)
np.testing.assert_array_equal(b.numpy(), x.reshape(7, 4)[::-1] * 0.5)
np.testing.assert_array_equal(c.numpy(), np.add.outer(np.arange(3) * 10, np.arange(2)))
f = tf.function(lambda x: op(x, np.int64(6), np.float32(1), False))
print([o.shape.as_list() for o in f.get_concrete_function(tf.TensorSpec([None])).structured_outputs])
try:
    op(x, np.int64(6), np.float32(1), False)
except tf.errors.InvalidArgumentError as err:
    print(err.message)
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "[[6, 4], [3, None]]"  # a scalar TF knows gives static dims; TF has no %
    assert "argument 'a' (input 0) must have shape [(n * 4)] (with n=6); got shape [28]" in lines[1]


def test_bad_arguments(tmp_path):
    add = make_add_bias(name="add")
    with pytest.raises(ValueError, match="TensorFlow already has an op named 'Add'"):
        tftvm.codegen(add, tmp_path / "x")
    with pytest.raises(ValueError, match="op_type='my op'"):
        tftvm.codegen(add, tmp_path / "x", op_type="my op")
    with pytest.raises(TypeError, match="reference must be a function defined with `def`"):
        tftvm.codegen(add, tmp_path / "x", op_type="MyAdd", reference=lambda a, b: (a + b, a))
    assert not (tmp_path / "x").exists()


def test_names_that_clash_in_cpp_are_renamed(tmp_path):
    from tvm import te

    n = te.var("c")  # `c` is also the shape function's InferenceContext
    A = te.placeholder((n,), "float32", name="ctx")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="name")
    project = tftvm.codegen(tftvm.op([A], [B], name="clash"), tmp_path / "clash")
    source = (project / "clash_op.cc").read_text()
    assert '.Input("ctx2: float")' in source and '.Output("name_: float")' in source
    assert "DimensionHandle c2 = c->Dim(ctx2_shape, 0);" in source


def test_cli(tmp_path):
    (tmp_path / "kernels.py").write_text(
        "import tftvm\nfrom tvm import te\n"
        "A = te.placeholder((8,), 'float32', name='A')\n"
        "twice = tftvm.op([A], [te.compute((8,), lambda i: A[i] * 2.0, name='B')], name='cli_twice')\n"
        "def twice_numpy(a):\n    return a * 2\n"
    )
    from tftvm import cli

    out = tmp_path / "p"
    assert cli.main(["codegen", f"{tmp_path}/kernels.py:twice", "--out", str(out), "--reference", "twice_numpy"]) == 0
    assert "def twice_numpy(a):" in (out / "test_cli_twice.py").read_text()
    assert cli.main(["codegen", f"{tmp_path}/kernels.py:nothing", "--out", str(tmp_path / "q")]) == 2
    assert cli.main(["codegen", "no_colon", "--out", str(tmp_path / "q")]) == 2
