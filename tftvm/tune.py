"""MetaSchedule tuning of tftvm ops and optimized models, with records in a JSON database.

`tune(op, trials=N, database=DIR)` searches schedules for the op's PrimFunc and
returns the same op compiled with the best one; `tune(optimized, ...)` does the
same for every kernel of a `tftvm.optimize` result at once (MetaSchedule's task
scheduler shares the trials among them) and returns the model rebuilt. Later
`tftvm.op(..., database=DIR)` / `tftvm.optimize(..., database=DIR)` calls (or any
call with TFTVM_TUNING_DB set) find the records and compile the tuned schedules
instead of the default one; the kernel cache keys on the chosen schedule, so a
tuned kernel never hides behind an untuned cache entry. `tune(compiled, ...)` tunes a
`tftvm.compile_model` result's kernels at concrete input shapes and returns it with a
static program for each.
"""
from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import re
import time

from . import rpc_runner, tunable
from .records import DATABASE_ENV, database_dir, drop_wrong_records, workload
from .signature import symbolic_reason

log = logging.getLogger(__name__)


@dataclasses.dataclass
class TuneProgress:
    """What a `progress` callback gets after each measured batch of candidates."""

    trials_done: int
    trials: int
    tasks: int
    elapsed_s: float
    best_ms: dict  # task name -> best measured latency so far (ms)


def tune(target_obj, *, trials: int = 64, database=None, seed: int | None = None,
         time_budget: float | None = None, progress=None, shapes=None, rpc: str | None = None):  # fmt: skip
    """Tune with MetaSchedule; return the same thing rebuilt with the tuned schedules.

    `target_obj`: a tftvm op (one with symbolic dims is tuned at `shapes`, a list of sets of
    input shapes, and comes back as a `ShapeDispatchOp` running a tuned static variant for
    calls at those shapes), a list of tftvm ops, a `tftvm.optimize` result (every
    kernel of it; kernels with symbolic dims are skipped with a log line: optimize with
    a static input_signature to tune them; made without an input_signature, the variants
    it compiled for the shapes it was called with, and later variants use the records), or
    a `tftvm.compile_model` result: its kernels are tuned at concrete input `shapes` (as `compile_model(specialize=...)`
    takes them; default: each `None` dim 1) and it comes back with a static program for
    each, tuned (calls with other shapes run the general program, untuned). `trials`: measured
    candidates in all, shared among the kernels. `database`: a directory (created),
    default $TFTVM_TUNING_DB; records already there are kept and the best of all is
    used. `time_budget`: seconds after which the search stops (checked after each
    round of one batch per kernel). `progress(TuneProgress)` is called after each batch.
    Kernels are tuned for the target they were compiled for. `rpc`: "HOST:PORT:KEY" (default
    $TFTVM_RPC): candidates are built here and measured on the servers registered under KEY
    with that TVM RPC tracker (see tftvm.rpc_runner), one at a time per server; without it,
    on this machine. Before returning, the best records are checked against the default
    schedule on random inputs (where they were measured: here, or on one of the servers)
    and wrong ones removed (see tftvm.records).
    """
    from .op import TvmOp

    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    if time_budget is not None and time_budget <= 0:
        raise ValueError(f"time_budget must be > 0 seconds, got {time_budget}")
    if isinstance(target_obj, (list, tuple)) and target_obj and all(isinstance(o, TvmOp) for o in target_obj):
        tunable.no_shapes(shapes)
        ops = list(target_obj)
        tuning = tunable.of_ops(ops, lambda **kw: [o.rebuilt(**kw) for o in ops], target_obj)
    elif callable(getattr(target_obj, "tuning", None)):
        tuning = target_obj.tuning(shapes)
    else:
        raise TypeError("tftvm.tune takes an op made by tftvm.op, a list of them, a tftvm.optimize or a "
                        f"tftvm.compile_model result; got {type(target_obj).__name__}")  # fmt: skip
    tracker = rpc_runner.parse(rpc)
    path = database_dir(database)
    if path is None:
        raise ValueError(f"tftvm.tune needs database= (a directory) or ${DATABASE_ENV}")
    tasks, own_schedules, weights = _tasks(tuning.kernels)
    if not tasks:
        log.warning("nothing to tune: every kernel has symbolic dims")
        return tuning.result
    path.mkdir(parents=True, exist_ok=True)
    _run_search(tasks, own_schedules, weights, tuning.target, path, trials, seed, time_budget, progress, tracker)
    try:  # checked where the records were measured: the servers run their target's code
        dropped = drop_wrong_records(tasks, tuning.target, path, tracker=tracker)
    except rpc_runner.RPCUnavailableError as err:
        raise rpc_runner.RPCUnavailableError(f"{err}. The records measured are in {path} but not checked against "
                                             "the default schedule yet: tune again (trials=1 will do) once a server "
                                             "is back, before building with them") from None  # fmt: skip
    if dropped:
        log.warning("dropped %d tuning records whose kernels computed wrong results", dropped)
    return tuning.rebuild(database=path)


def _tasks(kernels) -> tuple[dict, dict, dict]:
    """Task name -> PrimFunc workload, one per distinct static function (kernels repeat in
    models); task name -> the kernel's own schedule function, where it has one; and task
    name -> how many times the kernel occurs (MetaSchedule's task weight)."""
    import tvm_ffi

    tasks, own_schedules, weights = {}, {}, {}
    for kernel_name, prim_func, own_schedule in kernels:
        why = symbolic_reason(prim_func)
        if why is not None:
            log.info("not tuning '%s': %s", kernel_name, why)
            continue
        func = workload(prim_func)["main"]
        same = next((name for name, other in tasks.items() if tvm_ffi.structural_equal(func, other)), None)
        if same is not None:
            weights[same] += 1
            continue
        name = f"t{len(tasks):03d}_" + re.sub(r"\W", "_", kernel_name)
        tasks[name], weights[name] = func, 1
        if own_schedule is not None:
            own_schedules[name] = own_schedule
    return tasks, own_schedules, weights


def _run_search(tasks, own_schedules, weights, target, path, trials, seed, time_budget, progress, tracker) -> None:
    """MetaSchedule in rounds of one batch per kernel. With a time budget a round goes
    through the kernels a group at a time, the heaviest first, and the budget is checked
    after each group: a round of every kernel of a ResNet50 is ~1900 candidates, an hour
    on 2 cores. (Stopping tasks from inside MetaSchedule's scheduler trips its own
    checks.) One cost model serves every round, so what it learned carries over. With a
    `tracker` (rpc_runner.Tracker), candidates are measured on its servers; where a whole
    batch failed, the tracker is asked again, and a tracker gone or without servers stops
    the search with RPCUnavailableError (what was measured is in the database already).
    """
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    from .tune_builder import WorkerBuilder

    state = {"done": 0, "start": time.perf_counter(), "best": {}, "measured": 0}
    names = []  # task ids of the group being searched, in the order its contexts are given

    @derived_object
    class _Monitor(ms.measure_callback.PyMeasureCallback):
        """Counts trials and keeps the best latency per task, for logs and `progress`."""

        def apply(self, scheduler, task_id, candidates, builder_results, runner_results):
            state["done"] += len(runner_results)
            times = [float(sum(r.run_secs) / len(r.run_secs)) * 1e3
                     for r in runner_results if r.error_msg is None and r.run_secs]  # fmt: skip
            name = names[task_id]
            state["measured"] += len(times)
            if times:
                state["best"][name] = min([*times, state["best"].get(name, float("inf"))])
            elapsed = time.perf_counter() - state["start"]
            log.info("tuning: %d/%d trials, %.0f s; %s best %.4g ms", state["done"], trials, elapsed,
                     name, state["best"].get(name, float("nan")))  # fmt: skip
            if progress is not None:
                progress(TuneProgress(state["done"], trials, len(tasks), elapsed, dict(state["best"])))

    _import_tensor_intrinsics()
    tuning_target = _with_cores(target)
    per_iteration = _per_iteration(trials, len(tasks))
    groups = _groups(tasks, weights, per_iteration if time_budget is not None else 0)
    cost_model = ms.cost_model.CostModel.create("xgb", num_tuning_cores=os.cpu_count() or 1)
    # One builder and one runner for the whole search: each of their worker processes costs seconds to start.
    builder = WorkerBuilder()
    runner = tracker.runner() if tracker is not None else ms.runner.LocalRunner()
    log.info("tuning %d kernels: %d trials into %s", len(tasks), trials, path)
    try:
        for round_index in itertools.count():
            before, spent = state["done"], False
            for group_index, group in enumerate(groups):
                names[:] = group
                # TuneContexts made here, not by ms.tune_tir: that one reconfigures logging globally
                # (console output, log files, and a crash on unnamed handlers such as pytest's).
                group_seed = None if seed is None else seed + round_index * len(groups) + group_index  # new candidates
                contexts = [
                    ms.TuneContext(mod=tasks[name], target=tuning_target, space_generator="post-order-apply",
                                   search_strategy=_search_strategy(per_iteration), task_name=name, rand_state=rand_state,
                                   logger=logging.getLogger(f"{__name__}.{name}")).clone()
                    for name, rand_state in zip(group, ms.utils.fork_seed(group_seed, n=len(group)))
                ]  # fmt: skip
                measured_before = state["measured"]
                ms.tune_tasks(tasks=contexts, task_weights=[float(weights[name]) for name in group], work_dir=str(path),
                              max_trials_global=min(trials - state["done"], per_iteration * len(group)),
                              num_trials_per_iter=per_iteration, builder=builder, runner=runner, cost_model=cost_model,
                              measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), _Monitor()])  # fmt: skip
                if tracker is not None and state["measured"] == measured_before:
                    tracker.servers()  # raises where the tracker is gone or has no server left
                spent = time_budget is not None and time.perf_counter() - state["start"] > time_budget
                if state["done"] >= trials or spent:
                    break
            if state["done"] >= trials or state["done"] == before:  # done, or nothing left to try
                break
            if spent:
                log.info("tuning: time budget of %.0f s spent after %d trials; stopping", time_budget, state["done"])
                break
        _record_schedules(tasks, own_schedules, tuning_target, path, builder, runner)
    finally:
        builder.close()
        if tracker is None:
            runner.pool.shutdown()
    log.info("tuned %d kernels in %.1f s", len(tasks), time.perf_counter() - state["start"])


CANDIDATES_PER_CHECK = 64  # with a time budget: candidates measured between two looks at the clock


def _groups(tasks, weights, per_iteration: int) -> list[list[str]]:
    """The task names in the order they are searched, in groups searched together: all in one
    group without a budget (per_iteration 0); with one, the heaviest first (TVM's FLOP count
    times occurrences) in groups of about CANDIDATES_PER_CHECK candidates."""
    from tvm import IRModule
    from tvm.s_tir.analysis import estimate_tir_flops

    if not per_iteration:
        return [sorted(tasks)]

    def cost(name):
        try:
            return estimate_tir_flops(IRModule({"main": tasks[name]})) * weights[name]
        except Exception:  # TVM raises its own error types on what it cannot count
            return 0.0

    order = sorted(tasks, key=lambda name: (-cost(name), name))
    size = max(1, CANDIDATES_PER_CHECK // per_iteration)
    return [order[i : i + size] for i in range(0, len(order), size)]


def _record_schedules(tasks, own_schedules, target, path, builder, runner) -> None:
    """Measure tftvm's default schedule of each kernel, and the op's own schedule where
    it has one, as MetaSchedule measures its candidates, and add them to the database:
    the best record is then never slower than the untuned kernel (few trials often
    find nothing better for small kernels) nor than the user's hand schedule, built and
    measured where the candidates were."""
    from tvm.s_tir import meta_schedule as ms

    from .schedule import custom_trace, default_cpu_trace

    db = ms.database.JSONDatabase(work_dir=str(path))
    schedules = [(name, "default", default_cpu_trace(workload(func))) for name, func in tasks.items()]
    schedules += [(name, "own", custom_trace(workload(tasks[name]), fn)) for name, fn in own_schedules.items()]
    built = builder.build([ms.builder.BuilderInput(sch.mod, target) for _, _, sch in schedules])
    args = {name: ms.arg_info.ArgInfo.from_prim_func(func) for name, func in tasks.items()}
    for (name, kind, _), b in zip(schedules, built):
        if b.error_msg is not None:
            log.warning("%s schedule of %s did not build: %s", kind, name, b.error_msg)
    runnable = [(s, b) for s, b in zip(schedules, built) if b.error_msg is None]
    futures = runner.run([ms.runner.RunnerInput(b.artifact_path, "cpu", args[name])
                                           for (name, _, _), b in runnable])  # fmt: skip
    for ((name, kind, sch), _), future in zip(runnable, futures):
        result = future.result()
        if result.error_msg is not None:
            log.warning("%s schedule of %s did not run: %s", kind, name, result.error_msg)
            continue
        workload_entry = db.commit_workload(workload(tasks[name]))
        db.commit_tuning_record(ms.database.TuningRecord(sch.trace, workload_entry,
                                                         result.run_secs, target, args[name]))  # fmt: skip
        log.info("%s: %s schedule %.4g ms", name, kind, 1e3 * float(sum(result.run_secs)) / len(result.run_secs))


def _import_tensor_intrinsics() -> None:
    """Import tvm.s_tir.tensor_intrin (MetaSchedule does, for every task) in seconds, not minutes.

    It parses a few hundred TVMScript intrinsics, and each parse calls inspect.stack(),
    which resolves every frame's module by scanning sys.modules: with TF's ~4000
    modules loaded that took 30 s to over 3 minutes on 2 cores. The parser only uses
    the frames themselves, so for this one import inspect.stack skips the lookup.
    """
    import inspect
    import sys

    if "tvm.s_tir.tensor_intrin" in sys.modules:
        return

    def frames_only(context=1):
        frame, out = sys._getframe(1), []
        while frame is not None:
            code = frame.f_code
            out.append(inspect.FrameInfo(frame, code.co_filename, frame.f_lineno, code.co_name, None, None))
            frame = frame.f_back
        return out

    original, inspect.stack = inspect.stack, frames_only
    try:
        import tvm.s_tir.tensor_intrin  # noqa: F401
    finally:
        inspect.stack = original


def _per_iteration(trials: int, tasks: int) -> int:
    """Candidates measured per search round: up to 64 (MetaSchedule's default), and few
    enough that every task gets two rounds, so its cost model learns from the first."""
    return max(1, min(64, trials // (2 * tasks)))


def _search_strategy(per_iteration: int):
    """MetaSchedule's evolutionary search with its population scaled to the round: by default
    it evolves 512 schedules to pick a round's 64 candidates, 8 per candidate, and keeps
    that ratio here down to 64 schedules. A round of 1-8 candidates from 512 took seconds
    of search per kernel, more than building and measuring them."""
    from tvm.s_tir import meta_schedule as ms

    return ms.search_strategy.EvolutionarySearch(population_size=min(512, max(64, 8 * per_iteration)))


def _with_cores(target):
    """MetaSchedule wants the core count in the target; the compiled code does not depend on it."""
    import tvm

    config = dict(target.export())
    config.setdefault("num-cores", os.cpu_count() or 1)
    return tvm.target.Target(config)
