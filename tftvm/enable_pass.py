"""`tftvm.enable()`: TVM for an unchanged script, through TF's own graph optimization passes.

While enabled, every graph TF instantiates (a tf.function's first call per input signature,
Keras predict/fit/evaluate, a loaded SavedModel's signatures) goes through tftvm's pass
(`_native/graph_pass.cc`), which hands it to `graph.function_pass`: the same pipeline,
kernel cache and tuning database as `tftvm.optimize`. A failure in the pass leaves that graph
to TF and says why in the log and in `enabled_report()`.

A `tf.function(jit_compile=True)` (Keras' `jit_compile`, keras_hub's `generate`) never reaches
TF's graph passes: XLA compiles it instead. While enabled (unless `jit_compile="xla"`), TF's
`jit_compile_rewrite` is on, so such a function goes through the passes and then TF's executor;
the pass hands back to XLA what it should still compile (`_native/xla_function.cc`):
- `"replace"` (the default): TVM's clusters and the TF ops around them run in TF's executor, as
  in a function without jit_compile; a function with nothing offloaded stays XLA's. A failure
  stays in the pass, where the graph is left to TF (or XLA).
- `"inside"`: TVM's clusters become TvmCall nodes, and XLA compiles the whole function, the
  clusters as custom calls (TvmCall's XLA kernel). XLA compiles after the pass, at the first
  call of each shape, so a cluster XLA cannot compile (a dim set by a computed scalar) fails
  that call;
- `"xla"`: jit_compile functions are left to XLA, as they are without tftvm.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading

log = logging.getLogger(__name__)

_state = threading.Lock()
_options: dict = {}
_rewrites: list = []  # function_pass.Rewrite per graph the pass saw, in order
_rewritten_kept = False  # disabled with keep_rewritten=True: TF may still run rewritten graphs
JIT_MODES = {"xla": 0, "inside": 1, "replace": 2}  # graph_pass.cc's JitMode
_jit_rewrite_before: list = []  # TF's own jit_compile_rewrite setting, while enable() sets it


def enable(*, min_cluster_size: int = 3, max_clusters: int | None = None, allow: set | None = None,
           deny: set | None = None, target=None, database=None, keep_faster=None, precision: str = "f32",
           jit_compile: str = "replace") -> None:  # fmt: skip
    """Offload the TVM-convertible parts of every graph TF runs from now on; the options are
    `tftvm.optimize`'s, and `jit_compile` says what becomes of `tf.function(jit_compile=True)`
    functions (the module's docstring). Functions called before are instantiated again on their
    next call, so they go through the pass too (unless the pass was on already, with these options)."""
    import tvm_ffi

    from . import native
    from .graph.lowering import precision as precisions
    from .graph.offload import safety_net

    precisions.check(precision)
    if jit_compile not in JIT_MODES:
        raise ValueError(f"jit_compile must be one of {sorted(JIT_MODES)}, not {jit_compile!r}")
    native.load()
    options = dict(min_cluster_size=min_cluster_size, max_clusters=max_clusters, allow=allow, deny=deny,
                   target=target, database=database, keep_faster=safety_net.enabled(keep_faster),
                   precision=precision, jit_compile=jit_compile)  # fmt: skip
    with _state:
        changed = not is_enabled() or options != _options
        _options.clear()
        _options.update(options)
        tvm_ffi.register_global_func("tftvm.graph_pass", _graph_pass, override=True)
        tvm_ffi.get_global_func("tftvm.set_graph_pass_jit_mode")(JIT_MODES[jit_compile])
        _set_jit_compile_rewrite(jit_compile != "xla")
        tvm_ffi.get_global_func("tftvm.set_graph_pass_enabled")(True)
    if changed:
        _forget_instantiated_functions()
        log.info("tftvm pass enabled")


def disable(*, keep_rewritten: bool = False) -> None:
    """Every graph runs in TF alone from now on: functions the pass rewrote are instantiated
    again, from TF's graph, on their next call. `keep_rewritten=True` only stops rewriting
    new graphs (functions already rewritten keep their TVM graphs until TF instantiates them
    again): to compare functions with and without the pass in one process."""
    import tvm_ffi

    global _rewritten_kept
    setter = tvm_ffi.get_global_func("tftvm.set_graph_pass_enabled", allow_missing=True)
    if setter is None or not (is_enabled() or _rewritten_kept):
        return
    setter(False)
    _set_jit_compile_rewrite(False)
    _rewritten_kept = keep_rewritten
    if not keep_rewritten:
        _forget_instantiated_functions()


def _set_jit_compile_rewrite(on: bool) -> None:
    """TF's `jit_compile_rewrite` on (jit_compile functions reach the pass), or back to what it
    was before enable() set it."""
    from tensorflow.python.eager import context

    if on and not _jit_rewrite_before:
        _jit_rewrite_before.append(context.jit_compile_rewrite_enabled())
    if not on and not _jit_rewrite_before:
        return
    wanted = on or _jit_rewrite_before.pop()
    if wanted != context.jit_compile_rewrite_enabled():
        (context.enable_jit_compile_rewrite if wanted else context.disable_jit_compile_rewrite)()


def _forget_instantiated_functions() -> None:
    """TF keeps each function it instantiated (its optimized graph) in the eager context's
    kernel cache; clearing it makes the next call instantiate again, through the pass or not."""
    from tensorflow.python.eager import context

    context.context().clear_kernel_cache()


def is_enabled() -> bool:
    import tvm_ffi

    getter = tvm_ffi.get_global_func("tftvm.graph_pass_enabled", allow_missing=True)
    return bool(getter is not None and getter())


@contextlib.contextmanager
def enabled(**options):
    """`with tftvm.enabled(): ...`: enabled inside the block, as it was after it."""
    was = is_enabled()
    previous = dict(_options)
    enable(**options)
    try:
        yield
    finally:
        if was:
            enable(**previous)
        else:
            disable()


def rewrites() -> list:
    """What the pass did, as data: a `graph.function_pass.Rewrite` per graph it converted
    (function name, seconds, offloaded and compute node counts, report, error, kernels
    compiled and loaded from the cache)."""
    return list(_rewrites)


def enabled_report() -> str:
    """What the pass did, per function: offloaded compute nodes, compile time, kernels compiled
    and found in the kernel cache, and optimize's report (clusters, and why the rest stayed
    in TF). A function TF instantiated more than once (again after enable(), or in another
    runtime) is one entry: its latest report, with the times and kernel counts summed."""
    if not _rewrites:
        return "tftvm pass: no graph converted yet"
    by_function: dict = {}
    for r in list(_rewrites):
        by_function.setdefault(r.function, []).append(r)
    parts = []
    for name, runs in by_function.items():
        r = runs[-1]
        seconds = sum(x.seconds for x in runs)
        compiled, cached = sum(x.compiled for x in runs), sum(x.cached for x in runs)
        head = (f"{name}: {r.offloaded} of {r.compute_nodes} compute nodes offloaded in {seconds:.2f} s "
                f"({compiled} kernels compiled, {cached} from the cache)")  # fmt: skip
        if len(runs) > 1:
            head += f"; instantiated {len(runs)} times"
        parts.append(f"{head}\n  error: {r.error}" if r.error else f"{head}\n{r.report}")
    return "\n\n".join(parts)


def _graph_pass(graph_def: bytes, function_def: bytes) -> bytes:
    from .graph import function_pass

    try:
        options = {k: v for k, v in _options.items() if k != "jit_compile"}  # the pipeline's own
        rewritten, done = function_pass.rewrite(bytes(graph_def), bytes(function_def), options)
    except Exception as err:  # noqa: BLE001  the user's program must run on: this graph stays in TF
        name = _function_name(function_def)
        log.warning("tftvm pass: %s runs in TF: %s: %s", name, type(err).__name__, err)
        _rewrites.append(function_pass.Rewrite(name, 0.0, 0, 0, "", f"{type(err).__name__}: {err}"))
        return b""
    if done is not None:
        _rewrites.append(done)
    return rewritten


def _function_name(function_def: bytes) -> str:
    from tensorflow.core.framework.function_pb2 import FunctionDef

    try:
        return FunctionDef.FromString(bytes(function_def)).signature.name or "graph"
    except Exception:  # noqa: BLE001  a name for the report only
        return "graph"


def enable_from_environment() -> None:
    """`TFTVM_ENABLE=1` turns the pass on at `import tftvm`, for a script left unchanged."""
    if os.environ.get("TFTVM_ENABLE", "").strip().lower() in ("1", "true", "yes", "on"):
        enable()
