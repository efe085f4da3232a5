"""Every tutorial under docs/tutorials runs and prints what it promises."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT

TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("[0-9][0-9]_*.py"))
# A line each tutorial prints once its own checks against TF or NumPy have passed.
PROMISES = {
    "01_first_op": "silu works eagerly and in tf.function, and matches tf.nn.silu",
    "02_nmt_attention": "attention with TVM matmuls matches TF",
    "03_shapes_and_errors": "mean and variance match tf.nn.moments",
    "04_train_save_load": "served in a fresh process",
    "05_optimize_keras": "the saved and reloaded model matches too",
    "06_tuning": "a new op with database= compiles the tuned schedule",
    "07_codegen": "BiasGelu: 3 tests passed",
    "08_enable": "with tftvm.enable(), fit and predict match TF",
    "09_tvm_ffi_ops": "a tvm-ffi C++ kernel runs as a TF op",
}


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial_runs(path, tmp_path):
    # Their temporary folders (07's generated project) go to pytest's tmp_path, not /tmp.
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TMPDIR": str(tmp_path)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert PROMISES[path.stem] in proc.stdout, proc.stdout[-4000:]


def test_every_tutorial_has_a_promise():
    assert sorted(PROMISES) == [p.stem for p in TUTORIALS]
