"""compile_model's Relax VM with its parallel loops on the launcher TvmCall kernels use.

A library that TVM compiles in memory (`tvm.compile`) sends its parallel loops to TVM's own
thread pool, which splits each loop into one fixed part per thread: a core taken by another
process then holds up every loop by a whole part (benchmarks/RESULTS.md, "With a busy
neighbour"). Loaded from a shared library file instead, its loops can be pointed at
tftvm's launcher (_native/tf_threads.h), which hands each thread several small tasks, each
thread taking the next when it is free; the VM is then called inside a scope that gives the
launcher a pool of threads. `tftvm.native.use_tf_threads(False)` sends the loops back to
TVM's pool, for the VM as for a TvmCall.
"""
from __future__ import annotations

import functools
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

LIBRARY = "model.so"


def loaded(executable):
    """The runtime module of `executable` (what `tvm.compile` returns), loaded from a shared
    library written for it, its parallel loops on tftvm's launcher.

    The library is kept in the cache under its SHA-256 and loaded from there: TVM never
    unloads a library it loaded (one leaked reference, in TVM's runtime), so each load of a
    new file maps another copy for good, and a process that compiles some ten thousand
    models runs out of memory mappings and aborts. Loaded from one path per content, a model
    compiled again maps nothing new (dlopen finds the library it has)."""
    with tempfile.TemporaryDirectory(prefix="tftvm-vm-") as tmp:
        path = os.path.join(tmp, LIBRARY)
        executable.export_library(path)
        return load(_kept(path))


def _kept(path: str) -> str:
    """`path`'s library kept in the cache, named by its SHA-256: the path to load (`path`
    itself where the cache cannot be written). Written beside and renamed into place, so
    that another process sees the whole file or none."""
    import hashlib

    from . import cache_dir

    data = Path(path).read_bytes()
    try:
        kept = cache_dir.subdir("vm") / f"{hashlib.sha256(data).hexdigest()}.so"
        if not kept.exists() or hashlib.sha256(kept.read_bytes()).hexdigest() != kept.stem:
            partial = kept.with_name(f"{kept.name}.{os.getpid()}.partial")
            partial.write_bytes(data)
            os.replace(partial, kept)
        return str(kept)
    except OSError as err:
        log.warning("could not keep the model's library in the cache (%s); loading it from %s", err, path)
        return path


def load(path):
    """The library at `path` (an executable written by `export_library`), loaded with its
    parallel loops on tftvm's launcher."""
    import tvm
    import tvm_ffi

    from . import native

    native.load()  # the bridge library, which defines the launcher
    module = tvm.runtime.load_module(str(path))
    tvm_ffi.get_global_func("tftvm.use_tf_threads_for_library")(str(path))
    return module


def call(function, *args):
    """`function(*args)` (a VM entry) with the parallel loops of the kernels it calls on a
    pool of as many threads as TF's intra-op pool has."""
    return _launcher()(function, *args)


@functools.lru_cache(maxsize=None)
def _launcher():
    """The FFI entry with the pool's size bound: looked up once, not on every model call
    (the pool is made on the first call, and keeps that size)."""
    import tensorflow as tf
    import tvm_ffi

    threads = tf.config.threading.get_intra_op_parallelism_threads() or len(os.sched_getaffinity(0))
    return functools.partial(tvm_ffi.get_global_func("tftvm.call_on_shared_threads"), threads)
