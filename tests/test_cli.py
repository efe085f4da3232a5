"""The `tftvm` command: doctor, build-native, demo."""
import subprocess
import sys


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


def test_build_native_prints_the_cached_library():
    from tftvm import native

    proc = tftvm("build-native")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == str(native.library_path())


def test_demo_runs_and_checks_against_tf():
    proc = tftvm("demo")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "results match TF" in proc.stdout
    assert "tftvm/TF" in proc.stdout and "MLP layer, tf.function" in proc.stdout
