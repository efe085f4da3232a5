"""MetaSchedule tuning of tftvm ops, with its records in a JSON database on disk.

`tune(op, trials=N, database=DIR)` searches schedules for the op's PrimFunc and
returns the same op compiled with the best one. Later `tftvm.op(..., database=DIR)`
calls (or any call with TFTVM_TUNING_DB set) find the record and compile the
tuned schedule instead of the default one; the kernel cache keys on the chosen
schedule, so a tuned kernel never hides behind an untuned cache entry.
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

log = logging.getLogger(__name__)

DATABASE_ENV = "TFTVM_TUNING_DB"
_DATABASE_FILES = ("database_workload.json", "database_tuning_record.json")


def database_dir(database=None) -> Path | None:
    """The database directory in use: the argument, else $TFTVM_TUNING_DB, else None."""
    value = database if database is not None else os.environ.get(DATABASE_ENV) or None
    return None if value is None else Path(value)


def workload(func):
    """The IRModule MetaSchedule records are keyed by (one normal form for tune and lookup)."""
    import tvm

    func = func.with_attr("global_symbol", "main").with_attr("tirx.noalias", True)
    return tvm.IRModule({"main": func})


def tuned_schedule(func, target, database):
    """The best recorded schedule for `func` in `database`, or None (no directory, no record)."""
    path = database_dir(database)
    if path is None or not all((path / f).exists() for f in _DATABASE_FILES):
        return None
    from tvm.s_tir import meta_schedule as ms

    try:
        db = ms.database.JSONDatabase(work_dir=str(path), allow_missing=False)
        return db.query_schedule(workload(func), target, workload_name="main")
    except Exception as err:  # TVM reports a broken JSON file with its own error types
        raise ValueError(f"tuning database {path} cannot be read: {err}") from err


def tune(op, *, trials: int = 64, database=None, seed: int | None = None):
    """Tune `op` (a tftvm op built from a TVM function) with MetaSchedule; return it tuned.

    trials: measured candidates in all; database: a directory (created), default
    $TFTVM_TUNING_DB. Records already there are kept; the best of all is used.
    """
    from tvm.s_tir import meta_schedule as ms

    from . import kernel as kernel_lib
    from .op import TvmOp

    if not isinstance(op, TvmOp) or op.prim_func is None:
        raise TypeError("tftvm.tune takes an op made by tftvm.op (a loaded library has no TVM IR to tune)")
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    path = database_dir(database)
    if path is None:
        raise ValueError(f"tftvm.tune needs database= (a directory) or ${DATABASE_ENV}")
    path.mkdir(parents=True, exist_ok=True)
    target = kernel_lib.resolve_target(op.compile_options.get("target"))
    tuning_target = _with_cores(target)
    start = time.perf_counter()
    log.info("tuning '%s': %d trials into %s", op.name, trials, path)
    ms.tune_tir(workload(op.prim_func), tuning_target, str(path), max_trials_global=trials,
                num_trials_per_iter=min(trials, 64), seed=seed)  # fmt: skip
    log.info("tuned '%s' in %.1f s", op.name, time.perf_counter() - start)
    return op.rebuilt(database=path)


def _with_cores(target):
    """MetaSchedule wants the core count in the target; the compiled code does not depend on it."""
    import tvm

    config = dict(target.export())
    config.setdefault("num-cores", os.cpu_count() or 1)
    return tvm.target.Target(config)
