"""The `tftvm` command: doctor, build-native, demo."""
import os
import subprocess
import sys
from pathlib import Path


def tftvm(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "tftvm.cli", *args], capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


def test_doctor_reports_versions_and_loads_bridge():
    import tensorflow as tf
    import tvm

    proc = tftvm("doctor")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"tensorflow     {tf.__version__}" in proc.stdout
    assert f"apache-tvm     {tvm.__version__}" in proc.stdout
    assert "bridge loads   yes" in proc.stdout
    assert "embedded code  allowed" in proc.stdout
    from tftvm.cpu import features

    units = "AMX-BF16" if features.amx_bf16(None) else "AVX512-BF16" if features.avx512_bf16(None) else "f32"
    assert f"bf16 products  {units}" in proc.stdout


def test_build_native_prints_the_cached_library():
    from tftvm import native

    proc = tftvm("build-native")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == str(native.library_path())


def test_demo_runs_checks_against_tf_and_prints_no_tf_log_lines():
    """Through the installed `tftvm` command, as the README's set-up runs it."""
    command = Path(sys.executable).parent / "tftvm"
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([str(command), "demo"], capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "results match TF" in proc.stdout
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith(("bias+GELU", "MobileNetV2"))]
    assert [r[:3] for r in rows] == [["bias+GELU", "64x256,", "eager"], ["MobileNetV2", "96x96,", "batch"],
                                     ["MobileNetV2", "96x96,", "batch"]], proc.stdout  # fmt: skip
    assert " ".join(rows[1][4:6]) == "Keras, tf.function" and " ".join(rows[2][4:7]) == "TF's frozen graph"
    for row in rows:  # its ms, tftvm ms, tftvm/it
        its, ours, ratio = (float(v) for v in row[-3:])
        assert its > 0 and ours > 0 and abs(ratio - ours / its) < 0.01, row
    assert "oneDNN custom operations" not in proc.stderr and "cpu_feature_guard" not in proc.stderr, proc.stderr


def test_optimize_command_rewrites_a_saved_model(tmp_path):
    import keras
    import numpy as np
    import tensorflow as tf
    import tftvm as _  # noqa: F401  registers TvmCall, as a user's `import tftvm` does

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
    model.export(str(tmp_path / "src"), verbose=False)
    proc = tftvm("optimize", str(tmp_path / "src"), str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "cluster 1/1" in proc.stdout and "(100.0%)" in proc.stdout
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    out = tf.saved_model.load(str(tmp_path / "out")).signatures["serving_default"]
    (got,) = out(tf.constant(x)).values()
    np.testing.assert_allclose(got.numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)


def test_optimize_command_unknown_signature(tmp_path):
    import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.export(str(tmp_path / "src"), verbose=False)
    proc = tftvm("optimize", str(tmp_path / "src"), str(tmp_path / "out"), "--signature", "nope")
    assert proc.returncode == 2 and "has no signature 'nope'" in proc.stderr


def test_tune_command_tunes_and_saves_a_saved_model(tmp_path):
    import keras
    import numpy as np
    import tensorflow as tf
    import tftvm as _  # noqa: F401  registers TvmCall, as a user's `import tftvm` does

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
    model.export(str(tmp_path / "src"), verbose=False)
    db = tmp_path / "db"
    proc = tftvm("tune", str(tmp_path / "src"), str(tmp_path / "out"), "--database", str(db),
                 "--trials", "4", "--batch", "4")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "trials 4/4" in proc.stdout or "trials 5/4" in proc.stdout, proc.stdout
    assert (db / "database_tuning_record.json").read_text().strip()
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    out = tf.saved_model.load(str(tmp_path / "out")).signatures["serving_default"]
    (got,) = out(tf.constant(x)).values()
    np.testing.assert_allclose(got.numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)


def test_tune_command_refuses_unknown_dims_besides_the_batch(tmp_path):
    import tensorflow as tf

    module = tf.Module()
    module.f = tf.function(lambda x: tf.nn.relu(x * 2.0 + 1.0), input_signature=[tf.TensorSpec([None, None])])
    tf.saved_model.save(module, str(tmp_path / "src"), signatures=module.f.get_concrete_function())
    proc = tftvm("tune", str(tmp_path / "src"), str(tmp_path / "out"), "--database", str(tmp_path / "db"))
    assert proc.returncode == 2 and "has unknown dims" in proc.stderr and "besides the batch" in proc.stderr


def test_tune_command_with_an_unreachable_rpc_tracker_stops_before_compiling(tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = tftvm("tune", str(tmp_path / "no_model"), str(tmp_path / "out"), "--database", str(tmp_path / "db"),
                 "--rpc", f"127.0.0.1:{port}:k")  # fmt: skip
    assert proc.returncode == 2 and f"cannot reach the RPC tracker at 127.0.0.1:{port}" in proc.stderr, proc.stderr
    proc = tftvm("tune", "src", "out", "--database", "db", "--rpc", "127.0.0.1:k")
    assert proc.returncode == 2 and "rpc must be 'HOST:PORT:KEY'" in proc.stderr, proc.stderr
