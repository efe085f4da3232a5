"""Kernel and bridge-library caches: reuse across processes, corruption, concurrency."""
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import tftvm
from tftvm import cache_dir, kernel, native
from tvm import te

from conftest import run_python

PROGRAM = """
import logging, time
logging.basicConfig(level=logging.INFO)
import numpy as np, tftvm
from tvm import te
n = te.var("n")
A = te.placeholder((n, 32), "float32", name="A")
k = te.reduce_axis((0, 32), "k")
B = te.compute((n,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="B")
start = time.perf_counter()
op = tftvm.op([A], [B], name="sumsq")
print("OP_SECONDS", time.perf_counter() - start)
x = np.arange(64, dtype=np.float32).reshape(2, 32)
np.testing.assert_allclose(op(x).numpy(), (x * x).sum(1), rtol=1e-6)
print("OK")
"""


def test_second_process_loads_instead_of_compiling(tmp_path):
    env = {"TFTVM_CACHE_DIR": str(tmp_path)}
    shutil.copytree(native.library_path().parent, tmp_path / "native" / native.build_dir().name)
    first = run_python(PROGRAM, env)
    second = run_python(PROGRAM, env)
    assert first.returncode == 0 and second.returncode == 0, first.stderr[-3000:] + second.stderr[-3000:]
    assert "compiling TVM function 'sumsq'" in first.stderr
    assert "compiling TVM function" not in second.stderr
    assert "OK" in second.stdout


def _compile_sumsq(caplog):
    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] * A[i] + 7.0, name="B")
    with caplog.at_level(logging.INFO, logger="tftvm"):
        op = tftvm.op([A], [B], name="square_plus_7")
    np.testing.assert_array_equal(op(np.arange(4, dtype=np.float32)).numpy(), np.arange(4) ** 2 + 7)
    return op


@pytest.mark.parametrize("damage", ["truncate", "empty", "garbage", "sidecar"])
def test_corrupt_kernel_cache_entry_is_recompiled(caplog, damage, tmp_path, monkeypatch):
    monkeypatch.setenv("TFTVM_CACHE_DIR", str(tmp_path))  # its own entries: other tests' stay whole
    _compile_sumsq(caplog)
    entries = sorted(cache_dir.subdir("kernels").glob("*.so"), key=os.path.getmtime)
    lib = entries[-1]
    sidecar = lib.with_name(lib.name + kernel.SIDECAR_SUFFIX)
    if damage == "truncate":
        lib.write_bytes(lib.read_bytes()[:100])
    elif damage == "empty":
        lib.write_bytes(b"")
    elif damage == "garbage":
        lib.write_bytes(os.urandom(4096))
    else:
        sidecar.write_text("{not json")
    caplog.clear()
    kernel._register.cache_clear()
    _compile_sumsq(caplog)
    assert "corrupt kernel cache entry" in caplog.text
    assert "compiling TVM function 'square_plus_7'" in caplog.text


BUILD = """
import logging
logging.basicConfig(level=logging.INFO)
import numpy as np, tftvm.native as n
from tvm import te
print("BUILT", n.build())
print("LOADS", n.load() is not None)
import tftvm
A = te.placeholder((4,), "float32", name="A")
op = tftvm.op([A], [te.compute((4,), lambda i: A[i] + 1.0, name="B")])
assert (op(np.zeros(4, np.float32)).numpy() == 1).all()
print("OK")
"""


def test_two_processes_rebuild_a_corrupt_bridge_library_at_once(tmp_path):
    """One process rebuilds (linking the kept objects again where they are intact, as after
    this suite's first build; compiling where they are not), the other waits and loads it."""
    copy = tmp_path / "native" / native.build_dir().name
    shutil.copytree(native.library_path().parent, copy)
    lib = copy / native.LIBRARY_NAME
    lib.write_bytes(lib.read_bytes()[:1000])  # truncated, under its valid-looking name
    objects_kept = (copy / native.OBJECTS / native.OBJECT_SUMS).exists()
    env = dict(os.environ, TFTVM_CACHE_DIR=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", BUILD], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]  # fmt: skip
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        assert "LOADS True" in out and "OK" in out
    errs = "".join(err for _, err in outs)
    assert "is corrupt; rebuilding" in errs
    relinked, compiled = errs.count("relinking the tftvm bridge library"), errs.count("building the tftvm bridge library")
    assert (relinked, compiled) == ((1, 0) if objects_kept else (0, 1)), errs[-3000:]  # the other waited for it
    paths = {line.split()[1] for out, _ in outs for line in out.splitlines() if line.startswith("BUILT")}
    assert paths == {str(lib)}
    assert native._is_valid(lib) and not list(copy.glob("*.tmp")) and not list(copy.glob("objects-*"))
    assert (copy / native.OBJECTS / native.OBJECT_SUMS).exists()  # kept for the next time


def test_changed_objects_are_compiled_anew_not_linked(tmp_path, caplog):
    """An object that differs from its recorded SHA-256 is not linked: every source is compiled."""
    objects = tmp_path / native.OBJECTS
    objects.mkdir()
    compiles, _ = native.compile_commands(tmp_path / "lib.so", objects)
    sums = {}
    for command in compiles:
        Path(command[-1]).write_bytes(b"object")
        sums[Path(command[-1]).name] = native._sha256(Path(command[-1]))
    (objects / native.OBJECT_SUMS).write_text(json.dumps(sums))
    Path(compiles[0][-1]).write_bytes(b"changed")
    with caplog.at_level(logging.INFO, logger="tftvm.native"):
        assert not native._relinked(tmp_path / "lib.so", objects)
    assert "an object differs from its SHA-256" in caplog.text and not (tmp_path / "lib.so").exists()


def test_cache_dirs_are_private():
    for name in ("kernels", "modules", "native"):
        assert cache_dir.subdir(name).stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("damage", ["truncate", "empty", "garbage"])
def test_damaged_bridge_library_is_detected(tmp_path, damage):
    lib = tmp_path / native.LIBRARY_NAME
    shutil.copy(native.library_path(), lib)
    shutil.copy(native.library_path().with_suffix(".sha256"), lib.with_suffix(".sha256"))
    assert native._is_valid(lib)
    good = lib.read_bytes()
    lib.write_bytes({"truncate": good[: len(good) // 2], "empty": b"", "garbage": os.urandom(len(good))}[damage])
    assert not native._is_valid(lib)  # then build() rebuilds it (test_two_processes_rebuild_...)


def test_unusable_cache_root_falls_back_to_a_private_temp_dir(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TFTVM_CACHE_DIR", str(blocker / "cache"))
    with caplog.at_level(logging.WARNING, logger="tftvm"):
        root = cache_dir.subdir("kernels").parent
    assert "cache directory" in caplog.text and "is not usable" in caplog.text
    assert str(root).startswith(tempfile.gettempdir()) and os.stat(root).st_mode & 0o077 == 0
    shutil.rmtree(root)
    cache_dir.private_temp_dir.cache_clear()


FULL_DISK = """
import errno, os
import tftvm
from tftvm import cache_dir, kernel
root = str(cache_dir.cache_root())
real_write = cache_dir.atomic_write
def full(path, data):  # the cache's file system is full; the temp dir is not
    if str(path).startswith(root):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))
    real_write(path, data)
cache_dir.atomic_write = full
""" + PROGRAM.replace('name="sumsq"', 'name="sumsq_full_disk"')


def test_full_cache_disk_falls_back_with_a_warning(tmp_path):
    shutil.copytree(native.library_path().parent, tmp_path / "native" / native.build_dir().name)
    proc = run_python(FULL_DISK, {"TFTVM_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "could not write the kernel cache" in proc.stderr
    assert "could not write the TVM module to the cache" in proc.stderr and "OK" in proc.stdout


def test_two_processes_compile_the_same_kernel_at_once(tmp_path):
    shutil.copytree(native.library_path().parent, tmp_path / "native" / native.build_dir().name)
    env = dict(os.environ, TFTVM_CACHE_DIR=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", PROGRAM], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]  # fmt: skip
    results = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0 and "OK" in out, err[-3000:]
    assert len(list((tmp_path / "kernels").glob("*.so"))) == 1
