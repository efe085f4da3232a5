"""The tuning database: where it is, what a record is keyed by, and which records to trust.

MetaSchedule writes its records into a JSON database (two line-per-entry files);
compiling an op asks it for the fastest record of the op's PrimFunc. The fastest
record is not always right: TVM 0.27's `decompose_reduction`, run by MetaSchedule's
postprocessing, can hoist a reduction's init out of a consumer's loop (apache/tvm
#14791, closed as won't fix), and the kernel then computes a wrong answer at full
speed. So after each search, `drop_wrong_records` runs the best records against
the default schedule on random inputs and removes any that disagree.
"""
from __future__ import annotations

import itertools
import logging
import os
import tempfile
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

DATABASE_ENV = "TFTVM_TUNING_DB"
DATABASE_FILES = ("database_workload.json", "database_tuning_record.json")


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
    return tuned_schedules({0: func}, target, database).get(0)


def tuned_schedules(funcs: dict, target, database) -> dict:
    """key -> the best recorded schedule, for each of `funcs` (key -> PrimFunc) with a record
    in `database` (the files are read once)."""
    path = database_dir(database)
    if path is None or not funcs or not all((path / f).exists() for f in DATABASE_FILES):
        return {}
    from tvm.s_tir import meta_schedule as ms

    try:
        db = ms.database.JSONDatabase(work_dir=str(path), allow_missing=False)
        found = {}
        for key, func in funcs.items():
            mod = workload(func)
            records = _records_for(db, mod, target)
            if records:
                found[key] = _schedule(mod, records[0])
    except Exception as err:  # TVM reports a broken JSON file with its own error types
        raise ValueError(f"tuning database {path} cannot be read: {err}") from err
    return found


def _records_for(db, mod, target) -> list:
    """The records of `mod` measured for `target`, fastest first. MetaSchedule's own query
    takes the fastest record whatever its target: in a database shared by machines, a
    kernel built for one CPU would take a schedule tuned on another."""
    if not db.has_workload(mod):
        return []
    want = _target_key(target)
    return [r for r in db.get_top_k(db.commit_workload(mod), len(db)) if _target_key(r.target) == want]


def _target_key(target) -> str:
    """A target without the core count MetaSchedule's tuning adds to it (tune._with_cores)."""
    import json

    config = {k: v for k, v in dict(target.export()).items() if k != "num-cores"}
    return json.dumps(config, sort_keys=True, default=str)


def drop_wrong_records(funcs: dict, target, path: Path, seed: int = 0, tracker=None) -> int:
    """For each PrimFunc, check its records fastest first against the default schedule
    until one agrees; remove the ones that did not from the database. Returns how many.
    `tracker` (rpc_runner.Tracker): the kernels run on its servers instead of here (they
    run the target's code; this machine may not); a tracker without servers is an
    RPCUnavailableError, not a wrong record."""
    from tvm.s_tir import meta_schedule as ms

    from .schedule import default_cpu_schedule

    db = ms.database.JSONDatabase(work_dir=str(path), allow_missing=False)
    wrong = []
    for name, func in funcs.items():
        mod = workload(func)
        records = _records_for(db, mod, target)
        if not records:
            continue
        args = _random_args(func, np.random.default_rng(seed))
        run = _Runner(target, tracker)
        expected = run(default_cpu_schedule(mod), args)
        for rank, record in enumerate(records):
            why = _disagreement(run, _scheduled(mod, record), args, expected)
            if why is None:
                log.info("%s: best record checked against the default schedule (%d wrong before it)", name, rank)
                break
            log.warning("%s: dropping a tuning record that disagrees with the default schedule: %s", name, why)
            wrong.append(record)
    if wrong:
        _rewrite_without(db, wrong, path)
    return len(wrong)


def _schedule(mod, record):
    """The schedule of `mod` that a record's trace makes, as `query_schedule` makes it."""
    from tvm import s_tir

    sch = s_tir.Schedule(mod)
    record.trace.apply_to_schedule(sch, remove_postproc=False)
    return sch


def _scheduled(mod, record):
    return _schedule(mod, record).mod


def _random_args(func, rng) -> list[np.ndarray]:
    """Random contents for every buffer, outputs too (a kernel that skips part of an
    output then leaves different values there than one that writes it). Integers are
    0 or 1: they may be indices, and any axis has at least one element."""
    arrays = []
    for param in func.params:
        ty = param.ty
        shape, dtype = [int(d) for d in ty.shape], _numpy_dtype(str(ty.dtype))
        if dtype.kind == "f" or dtype.name == "bfloat16":
            arrays.append(rng.standard_normal(shape).astype(dtype))
        elif dtype.kind == "b":
            arrays.append(rng.integers(0, 2, shape).astype(bool))
        else:
            arrays.append(rng.integers(0, 2, shape).astype(dtype))
    return arrays


def _numpy_dtype(name: str) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:  # bfloat16 and the float8s live in ml_dtypes
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))


class _Runner:
    """Runs a module's main on copies of some arrays and returns every buffer after it: here,
    or on a server of `tracker` (one session per runner, a new one after a failure)."""

    def __init__(self, target, tracker=None):
        self.target, self.tracker, self._session = target, tracker, None

    def __call__(self, mod, args) -> list[np.ndarray]:
        import tvm

        executable = tvm.compile(mod, target=self.target)
        if self.tracker is None:
            return _ran(executable["main"], tvm.cpu(), args)
        try:
            if self._session is None:
                self._session = self.tracker.session()
            session = self._session
            with tempfile.TemporaryDirectory() as tmp:
                name = f"tftvm_check_{os.getpid()}_{next(_uploads)}.so"
                executable.export_library(os.path.join(tmp, name))
                session.upload(os.path.join(tmp, name))
            return _ran(session.load_module(name)["main"], session.cpu(), args)
        except Exception:
            self._session = None
            self.tracker.servers()  # RPCUnavailableError where the servers are gone: no verdict on the kernel
            raise  # the kernel, or its session, failed on a server still there


def _ran(kernel, device, args) -> list[np.ndarray]:
    import tvm

    tensors = [tvm.runtime.tensor(a.copy(), device=device) for a in args]
    kernel(*tensors)
    return [t.numpy() for t in tensors]


_uploads = itertools.count()


def _disagreement(run, mod, args, expected) -> str | None:
    """Why the scheduled module's results differ from `expected`, or None."""
    from .rpc_runner import RPCUnavailableError, last_line

    try:
        got = run(mod, args)
    except RPCUnavailableError:
        raise
    except Exception as err:  # a record whose trace no longer applies or builds is no good either
        return f"it does not build or run: {last_line(err)}"
    for index, (g, e) in enumerate(zip(got, expected)):
        if not _close(g, e):
            with np.errstate(invalid="ignore"):
                diff = np.abs(g.astype(np.float64) - e.astype(np.float64))
            return f"buffer {index} differs by up to {np.nanmax(diff):.3g}"
    return None


def _close(got: np.ndarray, expected: np.ndarray) -> bool:
    """Equal for integers; for floats, within what a reordered sum can change."""
    if got.dtype.kind not in "fV" and got.dtype.name != "bfloat16":
        return np.array_equal(got, expected)
    rtol = 1e-3 if got.dtype.itemsize >= 4 else 3e-2  # float16 and bfloat16 round far more
    got, expected = got.astype(np.float64), expected.astype(np.float64)
    finite = np.abs(expected[np.isfinite(expected)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    return bool(np.allclose(got, expected, rtol=rtol, atol=rtol * scale, equal_nan=True))


def _rewrite_without(db, wrong: list, path: Path) -> None:
    """The database again without the `wrong` records (its files are append-only,
    so it is written anew beside them and moved into place)."""
    from tvm.s_tir import meta_schedule as ms

    drop = {_identity(r) for r in wrong}
    with tempfile.TemporaryDirectory(dir=path, prefix=".rewrite-") as tmp:
        fresh = ms.database.JSONDatabase(work_dir=tmp)
        for record in db.get_all_tuning_records():
            if _identity(record) in drop:
                continue
            entry = fresh.commit_workload(record.workload.mod)
            fresh.commit_tuning_record(ms.database.TuningRecord(record.trace, entry, record.run_secs,
                                                                record.target, record.args_info))  # fmt: skip
        for name in DATABASE_FILES:
            os.replace(Path(tmp) / name, path / name)


def _identity(record) -> tuple:
    import tvm_ffi

    times = tuple(float(t) for t in record.run_secs) if record.run_secs else ()
    return tvm_ffi.structural_hash(record.workload.mod), str(record.trace), times
