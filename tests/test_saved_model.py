"""A graph with a tftvm op is self-contained: it runs in a fresh process from its own bytes."""
import shutil

import numpy as np
import pytest
import tensorflow as tf
from tftvm import native

from conftest import run_python

LOAD = """
import numpy as np, tensorflow as tf
import tftvm, tvm
def refuse(*a, **k):
    raise AssertionError("the TVM compiler must not run when loading a SavedModel")
tvm.compile = refuse
m = tftvm.load_saved_model({path!r}) if {use_tftvm} else tf.saved_model.load({path!r})
x = np.arange(3 * 64, dtype=np.float32).reshape(3, 64)
y, s = m.f(tf.constant(x))
np.save({out!r}, s.numpy())
print("OK")
"""


@pytest.mark.parametrize("use_tftvm", [False, True], ids=["tf.saved_model.load", "tftvm.load_saved_model"])
def test_saved_model_loads_in_a_fresh_process_with_empty_cache(add_bias, tmp_path, use_tftvm):
    b = np.linspace(-1, 1, 64).astype(np.float32)
    module = tf.Module()
    module.f = tf.function(lambda x: add_bias(x, tf.constant(b)),
                           input_signature=[tf.TensorSpec([None, 64])])  # fmt: skip
    tf.saved_model.save(module, str(tmp_path / "sm"))
    out = tmp_path / "s.npy"
    # A fresh cache holding only the bridge library (what an install builds once).
    fresh = tmp_path / "cache"
    shutil.copytree(native.library_path().parent, fresh / "native" / native.build_dir().name)
    proc = run_python(LOAD.format(path=str(tmp_path / "sm"), out=str(out), use_tftvm=use_tftvm),
                      env={"TFTVM_CACHE_DIR": str(fresh)})
    assert not (fresh / "kernels").exists()
    assert proc.returncode == 0, proc.stderr[-3000:]
    x = np.arange(3 * 64, dtype=np.float32).reshape(3, 64)
    np.testing.assert_array_equal(np.load(out), add_bias(x, b)[1].numpy())  # bit for bit


TAMPERED = """
import numpy as np, tensorflow as tf, tftvm
m = tf.saved_model.load({path!r})
try:
    m.f(tf.zeros([2, 64]))
except tf.errors.NotFoundError as err:
    print("REFUSED", err)
"""


def test_tampered_saved_model_is_refused(add_bias, tmp_path):
    module = tf.Module()
    module.f = tf.function(lambda x: add_bias(x, tf.zeros([64])),
                           input_signature=[tf.TensorSpec([None, 64])])  # fmt: skip
    tf.saved_model.save(module, str(tmp_path / "sm"))
    pb = tmp_path / "sm" / "saved_model.pb"
    data, lib = pb.read_bytes(), add_bias.kernel.library
    start = data.index(lib)  # the library is embedded verbatim in the node's attr
    middle = start + len(lib) // 2
    pb.write_bytes(data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:])
    fresh = tmp_path / "cache"
    shutil.copytree(native.library_path().parent, fresh / "native" / native.build_dir().name)
    proc = run_python(TAMPERED.format(path=str(tmp_path / "sm")), env={"TFTVM_CACHE_DIR": str(fresh)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "REFUSED" in proc.stdout and "SHA-256 mismatch" in proc.stdout
    assert not list((fresh / "modules").glob("*.so"))


SESSION_LOAD = """
import numpy as np, tensorflow as tf, tftvm
tf.compat.v1.disable_eager_execution()
with tf.compat.v1.Session(graph=tf.Graph()) as sess:
    meta = tf.compat.v1.saved_model.load(sess, ["serve"], {path!r})
    sig = meta.signature_def["serving_default"]
    x_name = sig.inputs["x"].name
    s_name = sig.outputs["output_1"].name
    out = sess.run(s_name, {{x_name: np.arange(2 * 64, dtype=np.float32).reshape(2, 64)}})
np.save({out!r}, out)
print("OK")
"""


def test_saved_model_through_the_v1_session_loader(add_bias, tmp_path):
    b = np.linspace(0, 1, 64).astype(np.float32)
    module = tf.Module()
    module.f = tf.function(lambda x: add_bias(x, tf.constant(b)),
                           input_signature=[tf.TensorSpec([None, 64], name="x")])  # fmt: skip
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures=module.f)
    fresh = tmp_path / "cache"
    shutil.copytree(native.library_path().parent, fresh / "native" / native.build_dir().name)
    out = tmp_path / "s.npy"
    proc = run_python(SESSION_LOAD.format(path=str(tmp_path / "sm"), out=str(out)),
                      env={"TFTVM_CACHE_DIR": str(fresh)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    x = np.arange(2 * 64, dtype=np.float32).reshape(2, 64)
    np.testing.assert_array_equal(np.load(out), add_bias(x, b)[1].numpy())


NO_PYTHON_TVM = """
import sys, numpy as np, tensorflow as tf
tf.load_op_library({lib!r})          # what a C++ server does with the bridge library
m = tf.saved_model.load({path!r})
y, s = m.f(tf.constant(np.ones((2, 64), np.float32)))
assert "tvm" not in sys.modules and "tftvm" not in sys.modules
np.save({out!r}, s.numpy())
"""


def test_saved_model_runs_with_the_bridge_library_alone(add_bias, tmp_path):
    module = tf.Module()
    module.f = tf.function(lambda x: add_bias(x, tf.ones([64])),
                           input_signature=[tf.TensorSpec([None, 64])])  # fmt: skip
    tf.saved_model.save(module, str(tmp_path / "sm"))
    out = tmp_path / "s.npy"
    code = NO_PYTHON_TVM.format(lib=str(native.library_path()), path=str(tmp_path / "sm"), out=str(out))
    proc = run_python(code, env={"TFTVM_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_array_equal(np.load(out), np.full(2, 128.0, np.float32))
