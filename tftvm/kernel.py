"""A compiled TVM module and its signature: content-hash keys, files, disk cache.

A Kernel is identified at run time by the SHA-256 of its library bytes (the key
every TvmCall node carries); the disk cache is indexed by a second hash, of
what went into compiling it (the IR, target and versions), so a second process
that builds the same op loads the library instead of recompiling.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import re
import tempfile
import threading
import time
import uuid
from pathlib import Path

from . import cache_dir
from .signature import Signature

log = logging.getLogger(__name__)

CACHE_FORMAT = 1
SIDECAR_SUFFIX = ".tftvm.json"  # written beside an exported library by Kernel.save


_counting = threading.local()


@contextlib.contextmanager
def counting():
    """Count the kernels this thread compiles and loads from the disk cache inside the block:
    yields {"compiled": n, "cached": m}, filled in as it goes."""
    counts = {"compiled": 0, "cached": 0}
    outer = getattr(_counting, "counts", None)
    _counting.counts = counts
    try:
        yield counts
    finally:
        _counting.counts = outer
        if outer is not None:
            for k, v in counts.items():
                outer[k] += v


def _count(what: str) -> None:
    counts = getattr(_counting, "counts", None)
    if counts is not None:
        counts[what] += 1


@dataclasses.dataclass(frozen=True)
class Kernel:
    func_name: str
    signature: Signature
    library: bytes  # the exported shared library

    @functools.cached_property
    def key(self) -> str:
        return hashlib.sha256(self.library).hexdigest()

    def register(self) -> None:
        """Load the module in this process and hand it to the bridge, once per key."""
        _register(self.key, self.library)

    def save(self, path: str | Path) -> Path:
        """Write the library to `path` and its signature beside it, for `tftvm.load_op`."""
        path = Path(path)
        cache_dir.atomic_write(path, self.library)
        cache_dir.atomic_write(path.with_name(path.name + SIDECAR_SUFFIX), self._sidecar())
        return path

    def _sidecar(self) -> bytes:
        return json.dumps({
            "format": CACHE_FORMAT,
            "func_name": self.func_name,
            "signature": json.loads(self.signature.to_json()),
            "library_sha256": self.key,
        }, indent=1).encode()  # fmt: skip


@dataclasses.dataclass(frozen=True)
class FunctionKernel:
    """A bare tvm-ffi function (a C++ function from `tvm_ffi.cpp.load_inline`'s module, a global
    function) as a kernel. No library stands behind it, so graphs holding it run in this
    process only: the bridge finds it by a key of its own (`function:<uuid>`)."""

    func_name: str
    signature: Signature
    function: object  # tvm_ffi.Function
    key: str = dataclasses.field(default_factory=lambda: f"function:{uuid.uuid4().hex}")
    library = b""  # what a graph node embeds: nothing to embed

    def register(self) -> None:
        import tvm_ffi

        from . import native

        native.load()
        tvm_ffi.get_global_func("tftvm.register_function")(self.key, self.function)

    def save(self, path: str | Path) -> Path:
        raise TypeError(f"tftvm op '{self.func_name}' is a bare tvm-ffi function with no library to save; "
                        "build one with tvm_ffi.cpp.build and load it with tftvm.load_op")  # fmt: skip


@functools.lru_cache(maxsize=None)
def _register(key: str, library: bytes) -> None:
    import tvm
    import tvm_ffi

    from . import native

    native.load()
    path = cache_dir.module_dir() / f"{key}.so"
    try:
        if not path.exists() or path.read_bytes() != library:
            cache_dir.atomic_write(path, library)
    except OSError as err:  # e.g. a full disk: dlopen needs a file, so write one elsewhere
        path = cache_dir.private_temp_dir() / f"{key}.so"
        log.warning("could not write the TVM module to the cache (%s); using %s", err, path)
        cache_dir.atomic_write(path, library)
    module = tvm.runtime.load_module(str(path))
    tvm_ffi.get_global_func("tftvm.register_module")(key, module, str(path))


def resolve_target(target):
    """A tvm.target.Target; None means this host's CPU with its real mcpu."""
    import tvm
    from tvm.target import codegen

    if target is None:
        target = {"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu()}
    if isinstance(target, dict):
        target = tvm.target.Target(target)
    if not isinstance(target, tvm.target.Target):
        raise TypeError(
            "target must be a dict such as {'kind': 'llvm', 'mcpu': 'skylake'} or a "
            f"tvm.target.Target, got {type(target).__name__} {target!r}"
        )
    if target.kind.name != "llvm":
        raise ValueError(
            f"target kind '{target.kind.name}': the tftvm kernel runs TVM code on CPU (llvm) only"
        )
    return target


def _versions() -> str:
    import tensorflow as tf
    import tvm
    import tvm_ffi

    return f"tf {tf.__version__} tvm {tvm.__version__} ffi {tvm_ffi.__version__}"


def _schedule_id(schedule: bool) -> str:
    """Part of the cache key: a change to the default schedule's code recompiles."""
    return "schedule=" + _schedule_digest() if schedule else "schedule=none"


@functools.cache
def _schedule_digest() -> str:
    """The default schedule's sources (the rules and their analysis), hashed once a process."""
    digest = hashlib.sha256()
    for path in sorted((Path(__file__).parent / "schedule").rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def compile_prim_func(func, *, func_name: str, num_outputs: int = 1, target=None,
                      schedule=True, database=None, argument_checks: bool = True) -> Kernel:  # fmt: skip
    """Compile one PrimFunc to a Kernel, or load it from the disk cache.

    `schedule`: True for the default CPU schedule, False for the function as
    written, or a function that schedules an s_tir.Schedule in place. A
    MetaSchedule record for `func` in `database` (default $TFTVM_TUNING_DB) wins
    over all of them. `argument_checks=False` leaves TVM's checks of each argument
    (rank, dtype, shape, alignment) out of the library: see `op`.
    """
    import tvm

    from .records import tuned_schedule

    signature = Signature.from_prim_func(func, num_outputs)
    target = resolve_target(target)
    tuned = tuned_schedule(func, target, database)
    if tuned is not None:
        log.info("kernel %s: using its tuned schedule", func_name)
        func, schedule_id = tuned.mod["main"], "schedule=tuned"
    mod = tvm.IRModule({func_name: func.with_attr("global_symbol", func_name)})
    if tuned is None and callable(schedule):  # keyed by the scheduled IR itself, below
        from .schedule import custom_trace

        mod, schedule_id = custom_trace(mod, schedule).mod, "schedule=custom"
    elif tuned is None:
        schedule_id = _schedule_id(schedule)
    script = mod.script(show_meta=True)
    skip_asserts = not argument_checks and not _has_asserts(script)
    if skip_asserts:
        schedule_id += " argument_checks=off"
    content = hashlib.sha256(
        "\n".join([str(CACHE_FORMAT), _versions(), str(target), schedule_id, script]).encode()
    ).hexdigest()
    kernel = read_cached(content)
    if kernel is not None:
        log.debug("kernel %s: loaded from the disk cache", func_name)
        _count("cached")
        return kernel
    if schedule is True and tuned is None:
        from .schedule import default_cpu_schedule

        mod = default_cpu_schedule(mod)
    start = time.perf_counter()
    log.info("compiling TVM function '%s' for %s", func_name, target)
    with _pass_context(skip_asserts):
        executable = tvm.compile(mod, target=target)
    with tempfile.TemporaryDirectory() as tmp:
        lib = Path(tmp) / "lib.so"
        executable.export_library(str(lib))
        kernel = Kernel(func_name, signature, lib.read_bytes())
    log.info("compiled '%s' in %.2f s", func_name, time.perf_counter() - start)
    _count("compiled")
    write_cached(content, kernel)
    return kernel


def _pass_context(skip_asserts: bool):
    """The current PassContext, with TVM's asserts left out where `skip_asserts`: the compile
    is otherwise the same (opt level, passes, config)."""
    import tvm

    if not skip_asserts:
        return tvm.transform.PassContext.current()
    return pass_context_like_current(config={"tirx.disable_assert": True})


def pass_context_like_current(*, config=None, disabled_pass=()):
    """A PassContext as the current one (opt level, passes, instruments, config), with `config`
    added and the passes `disabled_pass` named disabled too."""
    import tvm

    current = tvm.transform.PassContext.current()
    return tvm.transform.PassContext(
        opt_level=current.opt_level, required_pass=list(current.required_pass),
        disabled_pass=[*current.disabled_pass, *disabled_pass], instruments=list(current.instruments),
        config={**current.config, **(config or {})})  # fmt: skip


def _has_asserts(script: str) -> bool:
    """Whether a function's TVMScript checks something itself (an `assert` statement in its
    body): TVM's `tirx.disable_assert` would drop those with the argument checks."""
    return re.search(r"^\s*assert\b", script, re.MULTILINE) is not None


def _cache_path(content: str) -> Path:
    return cache_dir.subdir("kernels") / f"{content}.so"


def write_cached(content: str, kernel: Kernel) -> None:
    lib = _cache_path(content)
    try:
        kernel.save(lib)
    except OSError as err:
        log.warning("could not write the kernel cache %s: %s", lib, err)


def read_cached(content: str) -> Kernel | None:
    lib = _cache_path(content)
    if not lib.exists():
        return None
    try:
        return read_saved(lib)
    except (OSError, ValueError, KeyError, TypeError) as err:
        log.warning("ignoring a corrupt kernel cache entry %s (%s); recompiling", lib, err)
        return None


def read_saved(path: str | Path, func_name: str | None = None) -> Kernel:
    """A Kernel from a library saved by Kernel.save; checks it against its sidecar."""
    path = Path(path)
    sidecar = path.with_name(path.name + SIDECAR_SUFFIX)
    meta = json.loads(sidecar.read_text())
    if meta.get("format") != CACHE_FORMAT:
        raise ValueError(f"{sidecar} has format {meta.get('format')}, expected {CACHE_FORMAT}")
    library = path.read_bytes()
    if hashlib.sha256(library).hexdigest() != meta["library_sha256"]:
        raise ValueError(f"{path} does not match the SHA-256 recorded in {sidecar}")
    if func_name is not None and func_name != meta["func_name"]:
        raise ValueError(f"{path} holds function '{meta['func_name']}', not '{func_name}'")
    signature = Signature.from_json(json.dumps(meta["signature"]))
    return Kernel(meta["func_name"], signature, library)
