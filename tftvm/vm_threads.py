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
import os
import tempfile

LIBRARY = "model.so"


def loaded(executable):
    """The runtime module of `executable` (what `tvm.compile` returns), loaded from a shared
    library written for it, its parallel loops on tftvm's launcher."""
    with tempfile.TemporaryDirectory(prefix="tftvm-vm-") as tmp:
        path = os.path.join(tmp, LIBRARY)
        executable.export_library(path)
        return load(path)  # the loaded library stays mapped once its file is gone


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
