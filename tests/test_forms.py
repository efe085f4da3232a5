"""Every form tftvm.op accepts: TE, TVMScript PrimFunc, IRModule, exported library."""
import numpy as np
import pytest
import tensorflow as tf
import tftvm
import tvm
from tvm.script import ir as I
from tvm.script import tirx as T


@T.prim_func
def scale_shift(a: T.handle, s: T.handle, y: T.handle, z: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (n, 8), "float32")
    S = T.match_buffer(s, (8,), "float32")
    Y = T.match_buffer(y, (n, 8), "float32")
    Z = T.match_buffer(z, (n * 8,), "float32")
    for i, j in T.grid(n, 8):
        Y[i, j] = A[i, j] * S[j]
        Z[i * 8 + j] = A[i, j] + S[j]


@I.ir_module
class Pair:
    @T.prim_func
    def double(a: T.Buffer((16,), "int32"), b: T.Buffer((16,), "int32")):
        for i in range(16):
            b[i] = a[i] * 2

    @T.prim_func
    def negate(a: T.Buffer((16,), "int32"), b: T.Buffer((16,), "int32")):
        for i in range(16):
            b[i] = -a[i]


def test_tvmscript_primfunc_with_two_outputs(rng):
    op = tftvm.op(scale_shift, num_outputs=2, name="scale_shift")
    a = rng.standard_normal((3, 8), dtype=np.float32)
    s = rng.standard_normal(8, dtype=np.float32)
    y, z = op(a, s)
    np.testing.assert_array_equal(y.numpy(), a * s)
    np.testing.assert_array_equal(z.numpy(), (a + s).reshape(-1))
    f = tf.function(op, input_signature=[tf.TensorSpec([None, 8]), tf.TensorSpec([8])])
    y, z = f.get_concrete_function().structured_outputs
    assert z.shape.as_list() == [None]


def test_primfunc_default_is_one_output():
    op = tftvm.op(Pair["double"])
    assert len(op.signature.outputs) == 1 and op.name == "double"


def test_irmodule_picks_func_name():
    x = np.arange(16, dtype=np.int32)
    np.testing.assert_array_equal(tftvm.op(Pair, func_name="negate")(x).numpy(), -x)
    np.testing.assert_array_equal(tftvm.op(Pair, func_name="double")(x).numpy(), 2 * x)


def test_irmodule_without_func_name_is_an_error():
    with pytest.raises(ValueError, match=r"func_name=None.*\['double', 'negate'\]"):
        tftvm.op(Pair)


def test_unsupported_object_is_a_type_error():
    with pytest.raises(TypeError, match="tftvm.op takes TE tensors"):
        tftvm.op("not a function")


def test_saved_library_round_trips_with_its_signature(tmp_path):
    x = np.arange(16, dtype=np.int32)
    path = tftvm.op(Pair, func_name="double").save(tmp_path / "double.so")
    loaded = tftvm.load_op(path, "double")
    assert loaded.signature == tftvm.op(Pair, func_name="double").signature
    np.testing.assert_array_equal(loaded(x).numpy(), 2 * x)


def test_library_exported_by_tvm_itself_needs_a_signature(tmp_path):
    path = tmp_path / "negate.so"
    tvm.compile(Pair, target={"kind": "llvm"}).export_library(str(path))
    with pytest.raises(ValueError, match="carries no tftvm signature"):
        tftvm.load_op(path, "negate")
    x = np.arange(16, dtype=np.int32)
    by_func = tftvm.load_op(path, "negate", signature=Pair["negate"])
    np.testing.assert_array_equal(by_func(x).numpy(), -x)
    by_shapes = tftvm.load_op(path, "negate", signature=([("a", "int32", [16])], [("b", "int32", [16])]))
    np.testing.assert_array_equal(by_shapes(x).numpy(), -x)


def test_missing_library_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no TVM library"):
        tftvm.load_op(tmp_path / "nope.so", "f")


def test_missing_function_in_library(tmp_path):
    path = tftvm.op(Pair, func_name="double").save(tmp_path / "double.so")
    with pytest.raises(LookupError, match="has no function 'triple'"):
        tftvm.load_op(path, "triple", signature=Pair["double"])


def test_garbage_library_file(tmp_path):
    path = tmp_path / "garbage.so"
    path.write_bytes(b"this is not an ELF file" * 10)
    with pytest.raises(ValueError, match="not a loadable TVM library"):
        tftvm.load_op(path, "f", signature=Pair["double"])


def test_tampered_library_does_not_match_its_sidecar(tmp_path):
    path = tftvm.op(Pair, func_name="double").save(tmp_path / "double.so")
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="does not match the SHA-256"):
        tftvm.load_op(path, "double")


def test_explicit_target_dict():
    op = tftvm.op(Pair, func_name="double", target={"kind": "llvm"})
    np.testing.assert_array_equal(op(np.ones(16, np.int32)).numpy(), 2 * np.ones(16))


def test_cli_style_target_string_is_refused():
    with pytest.raises(TypeError, match="target must be a dict"):
        tftvm.op(Pair, func_name="double", target="llvm -mcpu=skylake")


def test_non_cpu_target_is_refused():
    with pytest.raises(ValueError, match="CPU"):
        tftvm.op(Pair, func_name="double", target={"kind": "cuda"})
