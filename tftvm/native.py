"""Builds the TvmCall op library with g++ and TF's own flags, caches it, loads it.

The cached library lives under a directory named by the TF, TVM and tvm-ffi
versions and a hash of the C++ sources, so any change rebuilds it. Builds are
serialized with a file lock and published with an atomic rename; a sidecar
SHA-256 detects a truncated or corrupt library, which is rebuilt, not loaded (linked
again from the compiled objects kept beside it, where they are intact).
"""
from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import json
import logging
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from . import cache_dir

log = logging.getLogger(__name__)

SOURCE_DIR = Path(__file__).parent / "_native"
LIBRARY_NAME = "libtftvm_native.so"


class NativeBuildError(RuntimeError):
    """The bridge library could not be compiled."""


def sources() -> list[Path]:
    return sorted(p for p in SOURCE_DIR.iterdir() if p.suffix in (".cc", ".h"))


def _versions() -> str:
    import tensorflow as tf
    import tvm
    import tvm_ffi

    return f"tf{tf.__version__}-tvm{tvm.__version__}-ffi{tvm_ffi.__version__}"


def build_dir() -> Path:
    digest = hashlib.sha256()
    for path in sources():
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    path = cache_dir.subdir("native") / f"{_versions()}-{digest.hexdigest()[:16]}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def library_path() -> Path:
    return build_dir() / LIBRARY_NAME


def compile_commands(output: Path, objects: Path) -> tuple[list[list[str]], list[str]]:
    """One g++ command per source file (they run in parallel) and the command that links
    their objects in `objects` into `output`."""
    import tensorflow as tf
    import tvm.libinfo
    import tvm_ffi.libinfo

    ffi_lib_dir = str(Path(tvm_ffi.libinfo.find_libtvm_ffi()).parent)
    tvm_lib_dir = str(Path(tvm.libinfo.find_libtvm_runtime()).parent)
    tf_lib_dir = tf.sysconfig.get_lib()
    cxx = os.environ.get("CXX", "g++")
    flags = [
        "-fPIC", "-O2", "-w",
        *tf.sysconfig.get_compile_flags(),
        "-I" + os.path.join(tf.sysconfig.get_include(), "external", "boringssl", "src", "include"),
        # XLA's headers (the XLA kernel of TvmCall, xla_call.cc) include these.
        "-I" + os.path.join(tf.sysconfig.get_include(), "external", "highwayhash"),
        "-I" + os.path.join(tf.sysconfig.get_include(), "external", "farmhash_archive", "src"),
        "-I" + tvm_ffi.libinfo.find_include_path(),
        "-I" + tvm_ffi.libinfo.find_dlpack_include_path(),
    ]  # fmt: skip
    files = [p for p in sources() if p.suffix == ".cc"]
    compiles = [[cxx, *flags, "-c", str(p), "-o", str(objects / (p.stem + ".o"))] for p in files]
    link = [
        cxx, "-shared", *[str(objects / (p.stem + ".o")) for p in files], "-o", str(output),
        *tf.sysconfig.get_link_flags(),
        "-l:libtensorflow_cc.so.2",  # XLA's builder, its op registry and FFI API (xla_call.cc)
        "-L" + ffi_lib_dir, "-ltvm_ffi",
        # TVM's runtime registers the loader for compiled modules: linking it makes
        # the library enough on its own for a C++ server (no Python, no `import tvm`).
        "-Wl,--no-as-needed", "-L" + tvm_lib_dir, "-ltvm_runtime",
        f"-Wl,-rpath,{ffi_lib_dir}", f"-Wl,-rpath,{tvm_lib_dir}", f"-Wl,-rpath,{tf_lib_dir}",
    ]  # fmt: skip
    return compiles, link


def _run(cmd: list[str]) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise NativeBuildError(f"g++ failed to build the tftvm bridge library:\n{shlex.join(cmd)}\n{result.stderr[-4000:]}")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _is_valid(lib: Path) -> bool:
    stamp = lib.with_suffix(".sha256")
    if not lib.exists() or not stamp.exists():
        return False
    if stamp.read_text().strip() != _sha256(lib):
        log.warning("cached bridge library %s is corrupt; rebuilding", lib)
        return False
    return True


def build(force: bool = False) -> Path:
    """Compile the bridge library unless a valid cached one exists; return its path. The
    compiled objects are kept beside it (with their SHA-256s), so a library found corrupt is
    linked again from them in seconds; `force` (a library that does not load) compiles anew."""
    lib = library_path()
    if not force and _is_valid(lib):
        return lib
    with cache_dir.file_lock(lib.parent / ".lock"):
        if not force and _is_valid(lib):  # another process built it while we waited
            return lib
        tmp = lib.parent / f".{LIBRARY_NAME}.{os.getpid()}.tmp"
        start = time.perf_counter()
        try:
            if force or not _relinked(tmp, lib.parent / OBJECTS):
                _compile_and_link(tmp, lib.parent / OBJECTS)
        except NativeBuildError:
            tmp.unlink(missing_ok=True)
            raise
        cache_dir.atomic_write(lib.with_suffix(".sha256"), _sha256(tmp).encode())
        os.replace(tmp, lib)
        log.info("built %s in %.1f s", lib, time.perf_counter() - start)
    return lib


OBJECTS = "objects"  # the compiled objects, beside the library
OBJECT_SUMS = "SHA256SUMS.json"


def _relinked(output: Path, objects: Path) -> bool:
    """Link `output` from the kept objects where every one is there and unchanged."""
    compiles, link = compile_commands(output, objects)
    try:
        sums = json.loads((objects / OBJECT_SUMS).read_text())
        if any(sums.get(Path(c[-1]).name) != _sha256(Path(c[-1])) for c in compiles):
            raise ValueError("an object differs from its SHA-256")
    except (OSError, ValueError) as err:
        log.info("no usable compiled objects in %s (%s)", objects, err)
        return False
    log.info("relinking the tftvm bridge library from its compiled objects: %s", output.parent)
    try:
        _run(link)
    except NativeBuildError as err:
        log.warning("relinking failed; compiling anew: %s", str(err).splitlines()[0])
        return False
    return True


def _compile_and_link(output: Path, objects: Path) -> None:
    """Compile every source into a new objects directory, link `output` and keep the objects."""
    fresh = Path(tempfile.mkdtemp(prefix="objects-", dir=output.parent))
    compiles, link = compile_commands(output, fresh)
    log.info("building the tftvm bridge library (%d files in parallel, about 30-60 s): %s", len(compiles), output.parent)
    try:
        # TF's and XLA's headers make each file slow to compile: one g++ per file and core.
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            list(pool.map(_run, compiles))
        _run(link)
        sums = {Path(c[-1]).name: _sha256(Path(c[-1])) for c in compiles}
        cache_dir.atomic_write(fresh / OBJECT_SUMS, json.dumps(sums).encode())
        shutil.rmtree(objects, ignore_errors=True)
        os.replace(fresh, objects)
    finally:
        shutil.rmtree(fresh, ignore_errors=True)


@functools.lru_cache(maxsize=None)
def load():
    """The loaded op library (its `tvm_call` wrapper); builds it on first use."""
    import tensorflow as tf
    import tvm  # noqa: F401  registers TVM's module loaders the kernel relies on
    import tvm_ffi

    lib = build()
    try:
        ops = tf.load_op_library(str(lib))
    except tf.errors.NotFoundError as err:
        log.warning("cached bridge library %s does not load (%s); rebuilding", lib, err)
        ops = tf.load_op_library(str(build(force=True)))
    # Where the kernel finds the library of a TvmCall node by its key (kernel.py writes them).
    tvm_ffi.get_global_func("tftvm.set_module_dir")(str(cache_dir.module_dir()))
    tvm_ffi.get_global_func("tftvm.set_tf_threads")(os.environ.get(TF_THREADS_ENV, "1") != "0")
    return ops


TF_THREADS_ENV = "TFTVM_TF_THREADS"


def functionalize_control_flow(graph_def: bytes) -> bytes:
    """A serialized GraphDef (with its library) with its TF1 control flow made While and If
    nodes by TF's own pass (tf2xla's FunctionalizeControlFlow, linked into the library);
    raises with TF's reason where the pass fails."""
    import tvm_ffi

    load()
    return bytes(tvm_ffi.get_global_func("tftvm.functionalize_control_flow")(graph_def))


def use_tf_threads(enabled: bool = True) -> None:
    """Whether the parallel loops of TVM kernels run by tftvm ops go to TF's intra-op thread
    pool (True, the default; $TFTVM_TF_THREADS=0 starts a process with False) or to TVM's own
    pool. TF's pool is shared with TF's kernels and hands each thread several small tasks, so a
    core taken by another process slows a loop by its share; TVM's pool splits a loop into one
    part per thread, fixed, and each TF thread that calls tftvm ops has a pool of its own
    (tf_threads.h). compile_model's VM runs its loops on the same launcher with a pool of
    tftvm's (vm_threads.py), or on TVM's pool where this is False."""
    import tvm_ffi

    load()
    tvm_ffi.get_global_func("tftvm.set_tf_threads")(bool(enabled))
