"""Every tutorial under docs/tutorials runs and prints what it promises."""
import subprocess
import sys

import pytest

from conftest import ROOT

TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.py"))


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial_runs(path):
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip()


def test_there_are_tutorials():
    assert TUTORIALS
