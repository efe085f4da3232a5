"""The safety net: a compiled cluster (or model) runs in TVM only where it is not slower than TF.

Each cluster is timed twice in one process, as its tftvm kernels and as its own TF nodes
(run by TF, grappler's fusions included), on random inputs of its input shapes with `None`
dims at MEASURE_DIM; the runs are interleaved and each side's median is kept (the pattern
of PyTorch Inductor's autotuning between its kernels and ATen). A cluster with `None` dims
is timed again with them at LARGE_DIM (a batch of 8 is not a batch of 1 eight times: TF's
kernels gain more from it than ours); where the two verdicts differ, the graph carries both
sides and a `SizeSwitch` picks one per call from the size of its inputs. A timed call repeats the
cluster, each repeat after the last, so that tf.function's call overhead (hundreds of µs)
does not drown a small cluster. Timings are cached on disk, keyed by the kernels' code, the
TF subgraph and the machine (CPU and threads: a verdict on 2 cores says nothing of 64), so a
second process pays nothing; a close call is measured again by the next processes (up to
MEASUREMENTS in all, the medians of them deciding), so one noisy run does not decide for
ever. Nor does a busy machine: a timing taken while other processes used more than BUSY_SHARE
of the cores (cpu/load.py) is measured again by the next processes, and the timings of a quiet
machine, once there is one, decide alone; a verdict older than MAX_AGE_DAYS is measured anew
(the machine, its neighbours, TF and tftvm change); `tftvm doctor --forget-timings` drops them
all. `compile_model` times the whole model (its VM against its frozen TF graph) with `time_calls`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import platform
import statistics
import time

import numpy as np
import tensorflow as tf

from ... import cache_dir
from ...cpu.load import others_share
from ..tfgraph.functions import graph_runner
from ..tfgraph.names import without_control_inputs
from .report import timings_text

log = logging.getLogger(__name__)

MEASURE_DIM = 1  # a `None` dim (a batch, mostly) is measured at this size
LARGE_DIM = 8  # and, for optimize's clusters, at this one too
SLOWER_MARGIN = 1.05  # TF replaces TVM only when it is this much faster: more than medians move
# In the loop bodies of a training step, a cluster costs more per iteration than its own
# timing shows (an LSTM step whose bodies timed as ties ran slower: benchmarks/HISTORY.md).
# There TVM must be this much faster to stay.
TRAINING_LOOP_MARGIN = 1.25
# Likewise a training step's main graph (a Transformer block's step timed alone as a tie ran
# slower as a whole). TVM stays there only where it is this much faster.
TRAINING_STEP_MARGIN = 1.10
ROUNDS = 7  # interleaved timed calls per side
CALL_SECONDS = 0.003  # a timed call repeats the cluster to last about this long
MAX_REPEATS = 32
WARM_CALLS = 3
# A call this long needs one warm call (the one that traces), no untimed call before each
# timed one (the other side's spin-waiting threads cost it under 1%), and its rounds fit
# LONG_CALL_BUDGET seconds, MIN_ROUNDS at least: a decoder's prefill at batch 8 (0.4 s a
# call) took 15 s of measuring at 7 rounds, a first call 5x TF's.
LONG_CALL_SECONDS = 0.05
LONG_CALL_BUDGET = 2.0
MIN_ROUNDS = 3
# A verdict whose TVM/TF ratio is within this factor of 1 is a close call (the margins are
# 1.05 to 1.25): later processes measure it again, until MEASUREMENTS timings decide.
CLOSE_CALL = 1.4
MEASUREMENTS = 3
# Other processes used more than this share of all cores while a timing was taken: TVM's
# parallel loops and TF's kernels lose unequally to a neighbour (benchmarks/contention.py),
# so the timing is no verdict on the quiet machine.
BUSY_SHARE = 0.25
MAX_AGE_DAYS = 30
FORMAT = 4  # 4: each timing says whether the machine was busy, and when it was taken


@dataclasses.dataclass(frozen=True)
class Timing:
    """Median seconds of one run of a cluster in TVM and in TF."""

    tvm_seconds: float
    tf_seconds: float
    cached: bool = False  # read from the disk cache, not measured by this process
    measurements: int = 1  # the timings (one per process) whose medians these are
    busy: bool = False  # other processes used more than BUSY_SHARE of the cores meanwhile
    taken_at: float = 0.0  # time.time() when it was measured

    @property
    def tf_faster(self) -> bool:
        return self.tf_seconds * SLOWER_MARGIN < self.tvm_seconds

    @property
    def close(self) -> bool:
        ratio = self.tvm_seconds / max(self.tf_seconds, 1e-12)
        return 1 / CLOSE_CALL < ratio < CLOSE_CALL

    def __str__(self) -> str:
        times = f"TVM {1e3 * self.tvm_seconds:.3f} ms, TF {1e3 * self.tf_seconds:.3f} ms"
        times += "" if self.measurements == 1 else f", medians of {self.measurements} runs"
        return times + (", the machine busy" if self.busy else "")


@dataclasses.dataclass(frozen=True)
class SizeSwitch:
    """Where a cluster's faster side depends on its size: TF's own nodes (`graph_def`) run
    the calls whose inputs `dynamic` (those with `None` dims) hold at least `elements`
    elements in all if `tf_when_large`, the smaller calls otherwise; TVM runs the rest."""

    dynamic: tuple[int, ...]
    elements: int
    tf_when_large: bool
    graph_def: object


def dynamic_inputs(step, frozen) -> tuple[int, ...]:
    """Positions of `step`'s inputs with a `None` dim (or an unknown rank)."""
    shapes = [frozen.tensor(t).shape for t in step.inputs]
    return tuple(i for i, s in enumerate(shapes) if s.rank is None or None in s.as_list())


def compare(step, frozen, graph_def, dim: int) -> Timing:
    """`step` (a compiled replay.ClusterStep of `frozen`, its own nodes `graph_def`: see
    subgraph) timed in TVM and in TF, its `None` dims at `dim`."""
    specs = _at_dim([tf.TensorSpec(frozen.tensor(t).shape, frozen.tensor(t).dtype) for t in step.inputs], dim)
    key = _key(step, graph_def, specs)
    before = _read(key)
    if before:
        cached = _combined(before)
        why = _why_measure_again(before, cached)
        if why is None:  # no inputs made: under enable() they hold every weight (500 MB for GPT-2)
            return dataclasses.replace(cached, cached=True)
        log.info("cluster %d, None dims at %d: %s (%s), measuring it again", step.index, dim, why, cached)
    inputs = random_inputs(specs)
    run_tf = graph_runner(graph_def, step.inputs, step.outputs)
    measured = before + [dataclasses.replace(time_both(step.program, run_tf, inputs), taken_at=time.time())]
    _write(key, measured)
    timing = _combined(measured)
    log.info("cluster %d, None dims at %d: %s", step.index, dim, timing)
    return timing


def _why_measure_again(timings: list[Timing], combined: Timing) -> str | None:
    """Why a later process measures a cached verdict again (None: it stands)."""
    if len(timings) >= MEASUREMENTS:
        return None
    if combined.close:
        return "a close call"
    if combined.busy:
        return "measured while other processes kept the cores busy"
    return None


def _combined(timings: list[Timing]) -> Timing:
    """One Timing of several processes' measurements: each side's median, over the timings
    of a quiet machine where there are any."""
    quiet = [t for t in timings if not t.busy] or timings
    return Timing(statistics.median(t.tvm_seconds for t in quiet), statistics.median(t.tf_seconds for t in quiet),
                  measurements=len(quiet), busy=all(t.busy for t in quiet),
                  taken_at=max(t.taken_at for t in quiet))  # fmt: skip


def size_switch(step, frozen, graph_def, dynamic) -> SizeSwitch | None:
    """The switch between TVM and TF for a cluster (its nodes `graph_def`, its inputs with
    `None` dims at positions `dynamic`) whose verdicts at MEASURE_DIM and LARGE_DIM
    (`step.timings`) differ; None where they agree or one is missing. The switch sits at
    the geometric mean of the two sizes measured."""
    small, large = step.timings.get(MEASURE_DIM), step.timings.get(LARGE_DIM)
    if small is None or large is None or small.tf_faster == large.tf_faster:
        return None
    sizes = [sum(_elements(frozen.tensor(step.inputs[i]).shape, dim) for i in dynamic) for dim in (MEASURE_DIM, LARGE_DIM)]
    return SizeSwitch(dynamic, math.ceil(math.sqrt(sizes[0] * sizes[1])), large.tf_faster, graph_def)


def _elements(shape, dim: int) -> int:
    return math.prod(dim if d is None else d for d in shape.as_list())


def enabled(keep_faster) -> bool:
    """The `keep_faster` option: as given, else $TFTVM_KEEP_FASTER ("0" turns it off)."""
    return keep_faster if keep_faster is not None else os.environ.get("TFTVM_KEEP_FASTER", "1") != "0"


def time_both(run_tvm, run_tf, inputs) -> Timing:
    """Interleaved medians of `run_tvm` and `run_tf` (functions of TF tensors) on `inputs`,
    each traced into a tf.function that repeats it (see _repeated)."""
    once = [_fetching(_repeated(run, 1, inputs), []) for run in (run_tvm, run_tf)]
    single = _single_run(once)
    repeats = _repeats(single)
    calls = [_fetching(_repeated(run, repeats, inputs), []) for run in (run_tvm, run_tf)] if repeats > 1 else once
    return _on_this_machine(lambda: _interleaved(calls, calls_per_sample=1, runs_per_call=repeats, single=single))


def time_calls(run_tvm, run_tf, inputs) -> Timing:
    """Interleaved medians of two Python callables on `inputs` (a whole compiled model and
    its TF graph: both called from Python, each call's overhead alike)."""
    calls = [_fetching(f, inputs) for f in (run_tvm, run_tf)]
    single = _single_run(calls)
    return _on_this_machine(lambda: _interleaved(calls, calls_per_sample=_repeats(single), runs_per_call=1,
                                                 single=single))  # fmt: skip


def _on_this_machine(measure) -> Timing:
    """measure()'s Timing, marked busy where other processes used more than BUSY_SHARE of
    the cores meanwhile."""
    timing, share = others_share(measure)
    if share > BUSY_SHARE:
        log.info("timed while other processes used %.0f%% of the cores: later processes measure it again", 100 * share)
    return dataclasses.replace(timing, busy=share > BUSY_SHARE)


def _fetching(f, inputs):
    """A call of `f` on `inputs` that waits for its outputs' values."""
    return lambda: [np.asarray(t) for t in tf.nest.flatten(f(*inputs))]


def _single_run(calls) -> float:
    """The faster side's seconds per call, after up to WARM_CALLS calls of each: the first
    traces TF's function (3 s for Xception); after it, a long call needs no more warming."""
    seconds = []
    for call in calls:
        call()
        took = _seconds(call)
        for _ in range(WARM_CALLS - 1):
            if took >= LONG_CALL_SECONDS:
                break
            took = _seconds(call)
        seconds.append(took)
    return min(seconds)


def _repeats(single: float) -> int:
    """Runs per sample so that a sample lasts about CALL_SECONDS."""
    return max(1, min(MAX_REPEATS, math.ceil(CALL_SECONDS / max(single, 1e-6))))


def _interleaved(calls, calls_per_sample: int, runs_per_call: int, single: float) -> Timing:
    """Medians over ROUNDS of seconds per run of the two `calls` (TVM's, TF's), interleaved;
    fewer rounds for calls of LONG_CALL_SECONDS or more (`single`: seconds per call), and
    MIN_ROUNDS where they decide beyond doubt: the slower side's fastest sample a CLOSE_CALL
    factor behind the faster side's slowest (a decoder's first call under enable() spent
    seconds timing its clusters to 7 rounds when 3 showed TVM at half TF's time)."""
    long_calls = single >= LONG_CALL_SECONDS
    rounds = max(MIN_ROUNDS, min(ROUNDS, int(LONG_CALL_BUDGET / (2 * single)))) if long_calls else ROUNDS
    samples: list[list[float]] = [[], []]
    for done in range(rounds):
        if done >= MIN_ROUNDS and _beyond_doubt(samples):
            break
        for side, call in enumerate(calls):
            # Untimed first: the other side's worker threads (TVM's pool, TF's) spin-wait a
            # while after it returns, and on 2 cores that slows whatever runs next.
            if not long_calls:
                call()
            seconds = sum(_seconds(call) for _ in range(calls_per_sample))
            samples[side].append(seconds / (calls_per_sample * runs_per_call))
    tvm_s, tf_s = (sorted(s)[len(s) // 2] for s in samples)
    return Timing(tvm_s, tf_s)


def _beyond_doubt(samples) -> bool:
    """Whether every sample of one side is CLOSE_CALL times faster than every one of the other."""
    tvm, tf_ = samples
    return max(tvm) * CLOSE_CALL < min(tf_) or max(tf_) * CLOSE_CALL < min(tvm)


def _seconds(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def random_inputs(specs, dim: int = MEASURE_DIM) -> list:
    """Inputs for timing: `None` dims at `dim`; see _random. Inputs of one shape and dtype
    are one tensor: under enable() a decoder's 84 weight matrices are inputs of 7 shapes, and
    drawing each took a second of its first call (timing does not depend on the values)."""
    made: dict = {}
    inputs = []
    for seed, spec in enumerate(_at_dim(specs, dim)):
        key = (tuple(spec.shape.as_list()), spec.dtype)
        if key not in made:
            made[key] = _random(spec, seed)
        inputs.append(made[key])
    return inputs


def _at_dim(specs, dim: int) -> list:
    return [tf.TensorSpec([dim if d is None else d for d in s.shape.as_list()], s.dtype) for s in specs]


def _repeated(run, repeats: int, inputs):
    """A tf.function of no arguments that runs `run` on `inputs` `repeats` times, each after the
    last finished. The inputs are captured, not passed: under enable() a cluster's weights are
    inputs, hundreds of them, and a tf.function call that passes that many arguments costs
    milliseconds of Python, paid by both sides, which would hide the difference being timed."""
    def body():
        outputs: list = []
        for _ in range(repeats):
            with tf.control_dependencies(outputs):
                again = [tf.identity(a) for a in inputs]  # waits for the previous run
            outputs = tf.nest.flatten(run(*again))
        return outputs

    return tf.function(body, autograph=False)


def subgraph(step, frozen):
    """The cluster's own nodes as a GraphDef (their inputs from outside fed by input_map)."""
    graph_def = tf.compat.v1.GraphDef(node=[without_control_inputs(n) for n in step.nodes])
    graph_def.versions.CopyFrom(frozen.graph_def.versions)
    return graph_def


RANDOM_BLOCK = 1 << 16  # normal floats drawn; a larger input repeats them


def _random(spec, seed: int):
    """Normal floats; zeros for integers and booleans (a gather index, a mask: always valid).
    A block of RANDOM_BLOCK floats is drawn and repeated: under enable() a decoder's weights
    are inputs, and drawing GPT-2's 124M took a second of its first call. Timing does not
    depend on which normal values repeat, only on their kind (no denormals, no NaNs)."""
    shape = spec.shape.as_list()
    count = math.prod(shape)
    if spec.dtype.is_floating and count:  # drawn as float32, not NumPy's float64: half the memory, twice the speed
        block = np.random.default_rng(seed).standard_normal(min(count, RANDOM_BLOCK), dtype=np.float32)
        value = np.empty(count, np.float32)
        whole = count // len(block) * len(block)
        value[:whole].reshape(-1, len(block))[:] = block
        value[whole:] = block[: count - whole]
        return tf.constant(value.reshape(shape), dtype=spec.dtype)
    return tf.zeros(spec.shape, spec.dtype)


def _key(step, graph_def, specs) -> str:
    parts = [str(FORMAT), tf.__version__, _machine(), graph_def.SerializeToString(deterministic=True).hex(),
             repr([(s.shape.as_list(), s.dtype.name) for s in specs]), repr(list(step.outputs))]  # fmt: skip
    parts += [k.kernel.key for k in step.program.kernels]  # the compiled code itself
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _machine() -> str:
    """What a timing depends on besides the code: the CPU, the cores this process may use, and
    the threads TF and TVM run with."""
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as info:
            model = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), model)
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = (tf.config.threading.get_intra_op_parallelism_threads(),
               tf.config.threading.get_inter_op_parallelism_threads(), os.environ.get("TVM_NUM_THREADS"))  # fmt: skip
    return f"{platform.machine()} {model} cores={cores} threads={threads}"


def _path(key: str):
    return cache_dir.subdir("timings") / f"{key}.json"


def forget_timings() -> int:
    """Drops every cached timing (the next optimize of each model measures its clusters
    again); returns how many there were."""
    entries = list(cache_dir.subdir("timings").glob("*.json"))
    for path in entries:
        path.unlink(missing_ok=True)
    return len(entries)


def _read(key: str) -> list[Timing]:
    """The timings measured before (one per process) and not older than MAX_AGE_DAYS, oldest
    first; none if there are none, or the entry is another tftvm's format."""
    path = _path(key)
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text())
        if isinstance(data, dict) and isinstance(data.get("format"), int) and data["format"] != FORMAT:
            log.info("timing cache entry %s is in format %d, not %d: measuring again", path, data["format"], FORMAT)
            return []
        timings = [Timing(float(m["tvm_seconds"]), float(m["tf_seconds"]), busy=bool(m["busy"]),
                          taken_at=float(m["taken_at"])) for m in data["measurements"]]  # fmt: skip
        if not timings:
            raise ValueError("no measurements")
    except (OSError, ValueError, KeyError, TypeError) as err:
        log.warning("ignoring a corrupt timing cache entry %s (%s); measuring again", path, err)
        return []
    fresh = [t for t in timings if time.time() - t.taken_at < MAX_AGE_DAYS * 86400]
    if len(fresh) < len(timings):
        log.info("timings older than %d days in %s: measuring again", MAX_AGE_DAYS, path)
    return fresh


def _write(key: str, timings: list[Timing]) -> None:
    data = {"format": FORMAT, "measurements": [{"tvm_seconds": t.tvm_seconds, "tf_seconds": t.tf_seconds,
                                                "busy": t.busy, "taken_at": t.taken_at} for t in timings]}  # fmt: skip
    try:
        cache_dir.atomic_write(_path(key), json.dumps(data).encode())
    except OSError as err:
        log.warning("could not write the timing cache: %s", err)


def keep_faster(step, frozen, reasons, tvm_must_win_by=None) -> None:
    """The safety net: a cluster that TF runs faster than its TVM kernels stays in TF; one
    with `None` dims is timed with them at 1 and at 8, and where the verdicts differ, both
    sides stay in the graph behind a switch on the inputs' size. With `tvm_must_win_by`,
    TVM stays only where it is that many times faster at every size measured."""
    dynamic = dynamic_inputs(step, frozen)
    graph_def = subgraph(step, frozen)  # the cluster's constants: copied once, not per size
    for dim in [MEASURE_DIM] + ([LARGE_DIM] if dynamic else []):
        try:
            step.timings[dim] = compare(step, frozen, graph_def, dim)
        except Exception as err:  # a failed measurement keeps TVM, which is correct, just unmeasured
            log.warning("cluster %d could not be timed against TF with None dims at %d (%s); that size runs "
                        "as the others do", step.index, dim, err)  # fmt: skip
    if not step.timings:
        return
    times = timings_text(step)
    if tvm_must_win_by is not None:
        if not all(t.tvm_seconds * tvm_must_win_by < t.tf_seconds for t in step.timings.values()):
            log.info("cluster %d stays in TF: TVM is not %.2fx as fast (%s)", step.index, tvm_must_win_by, times)
            step.program = None
            for n in step.nodes:
                reasons[n.name] = f"TVM is not {tvm_must_win_by:.2f}x as fast as TF, as a training step asks ({times})"
        return
    step.switch = size_switch(step, frozen, graph_def, dynamic)
    if step.switch is not None:
        log.info("cluster %d: TF is faster %s, TVM otherwise (%s)", step.index,
                 "for large inputs" if step.switch.tf_when_large else "for small inputs", times)  # fmt: skip
    elif all(t.tf_faster for t in step.timings.values()):
        log.info("cluster %d stays in TF, which is faster: %s", step.index, times)
        step.program = None
        for n in step.nodes:
            reasons[n.name] = f"TF runs its cluster faster ({times})"
