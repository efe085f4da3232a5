"""The docs site builds offline from README.md, docs/ and the tutorials, warnings as errors."""
import shutil
import subprocess
import sys

from conftest import ROOT


def test_docs_build_offline_with_every_tutorial(tmp_path):
    shutil.copytree(ROOT / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("_build", "generated"))
    shutil.copy(ROOT / "README.md", tmp_path)
    out = tmp_path / "html"
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           str(tmp_path / "docs"), str(out)], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    tutorials = sorted(p.stem for p in (ROOT / "docs" / "tutorials").glob("[0-9][0-9]_*.py"))
    assert len(tutorials) == 9
    for stem in tutorials:
        page = (out / "generated" / "tutorials" / f"{stem}.html").read_text()
        assert "What you should see" in page, stem
    assert "tftvm.optimize" in (out / "readme.html").read_text()
