"""Attention kernels: TF vs tftvm (default schedule and MetaSchedule-tuned), same run.

    python benchmarks/attention.py [--trials N] [--quick] [--database DIR] [--repeats N]

What is measured, float32, inputs are tf.constant standard normals:

* batch matmul, the shapes of Alibaba's "Bringing TVM into TensorFlow for NMT"
  post ([batch, M, N, K] with batch = 64 sentences x 8 heads, K = 128 head dim)
  plus a few from our issue's sweep (batch 1/16/64 x 8 heads, sequence 17/64,
  decoder step M=1 and encoder M=seq), each in two forms:
  Q·Kᵀ  A[b,M,K], B[b,N,K] -> [b,M,N]   (TF: tf.linalg.matmul(a, b, transpose_b=True))
  P·V   A[b,M,N], B[b,N,K] -> [b,M,K]   (TF: tf.linalg.matmul(a, b))
  Called eagerly, as users call them; both TF and tftvm ops dispatch through
  TF's eager fast path, so every time includes that dispatch (~15-35 µs), which
  dominates the small decoder-step shapes.
* the post's fused "batch matmul + transpose": Q·Kᵀ over [batch, heads, M, K]
  written straight to [batch, M, heads, N] by one TVM kernel, vs TF's matmul
  followed by tf.transpose (two eager ops).
* fused attention softmax(Q·Kᵀ/sqrt(d))·V as ONE TVM kernel (stages: scores,
  row max, exp, row sum, normalized product with V) vs the TF op sequence in
  tf.function and in tf.function(jit_compile=True) (XLA). Here all three run
  inside a tf.function, so each pays the same function-call overhead. Its
  tuned op is tuned from `attention_schedule`, a hand schedule (one query row
  per task) that MetaSchedule's candidates compete with: the tuned time is the
  best of both, as a TVM user would tune a kernel they had scheduled.

Each row: TF ms, tftvm untuned (default CPU schedule) ms, tftvm tuned ms, their
ratios to TF, the tuning seconds and trials. Every tftvm result is checked
against TF before it is timed; a row that fails prints its error and the run
goes on. Times are the minimum over 3 interleaved rounds (TF, untuned, tuned,
...) of the median of `--repeats` calls, so drift in machine load hits all alike.

Each op is tuned by its own `tftvm.tune(op, trials=N)` call (default 64), so a
row's `tune s` is that call's wall time and `trials` the candidates MetaSchedule
measured (failed ones too; fewer where the search space runs out); the first
row's time includes MetaSchedule's imports (a few seconds). tftvm.tune checks
the best records against the default schedule and drops wrong ones, and every
tuned op is checked against TF here before it is timed. Tuning goes into a
fresh temporary database by default, so the tuning time is real. With
`--database DIR`, an op that already has a record there is not tuned again (its
row shows 0 trials, 0 s) and new records are kept in DIR for next time.
A default run is nearly all tuning: 40-110 s per matmul op and 2-3 min per fused
attention op at 64 trials on 2 cores, about 25-30 minutes in all (measured with
other jobs sharing the cores). The tables print at the end; every finished row
is also logged as it ends, so a run cut short leaves its numbers in the log.
`--quick`: 3 batch-matmul shapes, 1 attention shape, 8 trials, 10 repeats.

`run(trials, repeats, database, quick)` returns the rows by section for a
results writer to import.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import tensorflow as tf
import tftvm
from tvm import te

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402  (benchmarks/ is not a package)

log = logging.getLogger("attention")

DEFAULT_TRIALS = 64
DEFAULT_REPEATS = 30
QUICK_TRIALS = 8
QUICK_REPEATS = 10
ROUNDS = 3
RTOL = ATOL = 1e-4

# [batch*heads, M, N, K]: the blog post's table, then our sweep's picks.
BLOG_SHAPES = [(512, 17, 17, 128), (512, 1, 17, 128), (512, 17, 1, 128), (512, 30, 30, 128)]
# Our sweep: batch 1/16/64 x 8 heads, sequence 17/64, encoder (M = seq) or decoder
# step (M = 1). Three picks the blog's table does not cover: each op costs about a
# minute of tuning at 64 trials on 2 cores, and the default run stays near 25 min.
SWEEP_SHAPES = [
    (8, 64, 64, 128),  # batch 1, encoder, seq 64
    (8, 1, 64, 128),  # batch 1, decoder step, seq 64
    (512, 1, 64, 128),  # batch 64, decoder step, seq 64
]
QUICK_SHAPES = [(512, 17, 17, 128), (512, 1, 17, 128), (8, 64, 64, 128)]
# [batch, heads, M, N, K] for the fused matmul + transpose.
TRANSPOSE_SHAPES = [(64, 8, 1, 17, 128)]
# [batch*heads, queries, keys, head dim] for fused attention.
# Each takes ~3 min to tune at 64 trials (81 design spaces); (128, 64, 64, 64) is
# left out for time.
ATTENTION_SHAPES = [(128, 17, 17, 64), (512, 1, 17, 128)]
QUICK_ATTENTION_SHAPES = [(128, 17, 17, 64)]


@dataclasses.dataclass
class Case:
    """One row: the TE function, the TF reference, and the input shapes."""

    label: str
    name: str  # the tftvm op name
    te_fn: Callable[[], tuple[list, list]]  # () -> (TE inputs, TE outputs)
    tf_fn: Callable  # the TF reference, called with the same tensors
    input_shapes: list[tuple[int, ...]]
    xla_fn: Callable | None = None  # fused attention only
    schedule: Callable | None = None  # a hand schedule that competes in tuning (fused attention)
    graph: bool = False  # time the tftvm op inside a tf.function (as the TF reference is)


# ---- TE definitions -------------------------------------------------------


def qk_te(b, m, n, k):
    A = te.placeholder((b, m, k), "float32", name="A")
    B = te.placeholder((b, n, k), "float32", name="B")
    r = te.reduce_axis((0, k), "r")
    C = te.compute((b, m, n), lambda i, x, y: te.sum(A[i, x, r] * B[i, y, r], axis=r), name="C")
    return [A, B], [C]


def pv_te(b, m, n, k):
    A = te.placeholder((b, m, n), "float32", name="A")
    B = te.placeholder((b, n, k), "float32", name="B")
    r = te.reduce_axis((0, n), "r")
    C = te.compute((b, m, k), lambda i, x, y: te.sum(A[i, x, r] * B[i, r, y], axis=r), name="C")
    return [A, B], [C]


def qk_transpose_te(batch, heads, m, n, k):
    A = te.placeholder((batch, heads, m, k), "float32", name="A")
    B = te.placeholder((batch, heads, n, k), "float32", name="B")
    r = te.reduce_axis((0, k), "r")
    # Output index order [batch, M, heads, N]: the transpose is free in the store.
    C = te.compute((batch, m, heads, n),
                   lambda i, x, h, y: te.sum(A[i, h, x, r] * B[i, h, y, r], axis=r), name="C")  # fmt: skip
    return [A, B], [C]


def attention_te(b, s, t, d):
    Q = te.placeholder((b, s, d), "float32", name="Q")
    K = te.placeholder((b, t, d), "float32", name="K")
    V = te.placeholder((b, t, d), "float32", name="V")
    scale = 1.0 / math.sqrt(d)
    rd = te.reduce_axis((0, d), "rd")
    rmax, rsum, rv = (te.reduce_axis((0, t), name) for name in ("rmax", "rsum", "rv"))
    scores = te.compute((b, s, t), lambda i, x, y: te.sum(Q[i, x, rd] * K[i, y, rd], axis=rd), name="scores")
    # The max of unscaled scores serves the scaled ones too (scale > 0).
    row_max = te.compute((b, s), lambda i, x: te.max(scores[i, x, rmax], axis=rmax), name="row_max")
    exp = te.compute((b, s, t), lambda i, x, y: te.exp((scores[i, x, y] - row_max[i, x]) * scale), name="exp")
    row_sum = te.compute((b, s), lambda i, x: te.sum(exp[i, x, rsum], axis=rsum), name="row_sum")
    prob = te.compute((b, s, t), lambda i, x, y: exp[i, x, y] / row_sum[i, x], name="P")
    # Normalized before the product with V: P·V stays the last stage. Dividing
    # after it would be fewer divisions, but then MetaSchedule (TVM 0.27) builds
    # no design space at all (its reverse-compute-at fails).
    out = te.compute((b, s, d), lambda i, x, j: te.sum(prob[i, x, rv] * V[i, rv, j], axis=rv), name="O")
    return [Q, K, V], [out]


def attention_schedule(sch) -> None:
    """A hand schedule for attention_te, given to tftvm.op(schedule=): one query row
    per parallel task, every stage of the row computed right before its use (the
    scores as 16-lane partial dot products), the output row accumulated in
    registers. tftvm.tune measures it beside MetaSchedule's candidates."""
    rd = sch.get_loops(sch.get_sblock("scores"))[-1]
    rd_outer, rd_lanes = sch.split(rd, [None, 16])
    sch.rfactor(rd_lanes, 0)  # the block "scores_rf": 16 partial sums per score
    out = sch.get_sblock("O")
    i, x, j, rv = sch.get_loops(out)
    sch.reorder(i, x, rv, j)
    row = sch.fuse(i, x)
    write_back = sch.cache_write(out, 0, "local")
    sch.reverse_compute_at(write_back, row)
    for stage in ["P", "row_sum", "exp", "row_max", "scores", "scores_rf"]:  # consumers first
        sch.compute_at(sch.get_sblock(stage), row)
    _, lanes, y, outer = sch.get_loops(sch.get_sblock("scores_rf"))
    sch.reorder(y, outer, lanes)
    sch.vectorize(lanes)
    sch.parallel(row)
    sch.vectorize(j)
    sch.vectorize(sch.get_loops(write_back)[-1])
    sch.decompose_reduction(out, rv)


# ---- TF references ----------------------------------------------------------


def tf_qk(a, b):
    return tf.linalg.matmul(a, b, transpose_b=True)


def tf_pv(a, b):
    return tf.linalg.matmul(a, b)


def tf_qk_transpose(a, b):
    return tf.transpose(tf.linalg.matmul(a, b, transpose_b=True), [0, 2, 1, 3])


def tf_attention(q, k, v):
    scale = 1.0 / math.sqrt(q.shape[-1])
    return tf.linalg.matmul(tf.nn.softmax(tf.linalg.matmul(q, k, transpose_b=True) * scale), v)


# ---- cases ------------------------------------------------------------------


def _dims(shape) -> str:
    return "x".join(map(str, shape))


def matmul_cases(shapes) -> list[Case]:
    cases = []
    for b, m, n, k in shapes:
        dims = _dims((b, m, n, k))
        cases.append(Case(f"Q·Kᵀ {dims}", f"qk_{dims}", lambda s=(b, m, n, k): qk_te(*s), tf_qk,
                          [(b, m, k), (b, n, k)]))  # fmt: skip
        cases.append(Case(f"P·V {dims}", f"pv_{dims}", lambda s=(b, m, n, k): pv_te(*s), tf_pv,
                          [(b, m, n), (b, n, k)]))  # fmt: skip
    return cases


def transpose_cases(shapes) -> list[Case]:
    return [
        Case(f"Q·Kᵀ+T {_dims(s)}", f"qkt_{_dims(s)}", lambda s=s: qk_transpose_te(*s), tf_qk_transpose,
             [(s[0], s[1], s[2], s[4]), (s[0], s[1], s[3], s[4])])  # fmt: skip
        for s in shapes
    ]


def attention_cases(shapes) -> list[Case]:
    graph_fn = tf.function(tf_attention)
    xla_fn = tf.function(tf_attention, jit_compile=True)
    return [
        Case(f"attn {_dims(s)}", f"attn_{_dims(s)}", lambda s=s: attention_te(*s), graph_fn,
             [(s[0], s[1], s[3]), (s[0], s[2], s[3]), (s[0], s[2], s[3])], xla_fn=xla_fn, graph=True,
             schedule=attention_schedule)  # fmt: skip
        for s in shapes
    ]


# ---- measuring ----------------------------------------------------------------


def _inputs(shapes, seed: int = 0) -> list[tf.Tensor]:
    rng = np.random.default_rng(seed)
    return [tf.constant(rng.standard_normal(s).astype(np.float32)) for s in shapes]


def _check(fn, args, expected: np.ndarray, what: str) -> None:
    got = fn(*args).numpy()
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL, err_msg=what)


def _short(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


def _brief(out: dict) -> str:
    return ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in out.items() if k != "case")


def _add_error(out: dict, message: str) -> None:
    """A row can collect more than one (XLA refused, and tuning failed)."""
    out["error"] = f"{out['error']}; {message}" if "error" in out else message


@dataclasses.dataclass
class Row:
    """A case on its way through the run: built and checked, tuned, timed."""

    case: Case
    section: str
    out: dict
    args: list | None = None
    expected: np.ndarray | None = None
    untuned: object = None
    tuned: object = None


def _prepare(case: Case, section: str, empty_db: Path) -> Row:
    row = Row(case, section, {"case": case.label})
    try:
        row.args = _inputs(case.input_shapes)
        row.expected = case.tf_fn(*row.args).numpy()
        # An empty database: the default schedule even if $TFTVM_TUNING_DB is set.
        row.untuned = tftvm.op(*case.te_fn(), name=case.name, database=empty_db)
        _check(row.untuned, row.args, row.expected, "untuned tftvm vs TF")
    except Exception as err:  # one broken row must not cost the rest of the run
        log.error("%s failed: %s", case.label, err)
        _add_error(row.out, _short(err))
        row.untuned = None
    return row


def _has_record(op, database: Path) -> bool:
    """Whether `database` holds a usable tuned schedule for `op`: what tftvm.op's build
    asks. (Comparing kernel keys is not enough: a tuned schedule can compile to
    the very library the default schedule gives, as Q·Kᵀ 8x64x64x128's once did.)"""
    from tftvm.kernel import resolve_target
    from tftvm.records import tuned_schedule

    target = resolve_target(op.compile_options.get("target"))
    return tuned_schedule(op.prim_func, target, database) is not None


def _recorded(row: Row, database: Path):
    """The op built from a tuned record already in `database`, or None."""
    if not _has_record(row.untuned, database):
        return None
    return tftvm.op(*row.case.te_fn(), name=row.case.name, database=database)


def _tune(row: Row, trials: int, database: Path, reuse: bool) -> None:
    """Sets row.tuned, and the row's tuning seconds and measured trials."""
    if reuse and (recorded := _recorded(row, database)) is not None:
        log.info("%s: tuned record found in %s; not tuning", row.case.label, database)
        row.tuned = recorded
        row.out.update({"tune s": 0.0, "trials": 0})
        return
    log.info("%s: tuning, %d trials", row.case.label, trials)
    seen = []
    start = time.perf_counter()
    op = row.untuned
    if row.case.schedule is not None:  # the hand schedule joins the candidates
        op = tftvm.op(*row.case.te_fn(), name=row.case.name, schedule=row.case.schedule, database=database)
    row.tuned = tftvm.tune(op, trials=trials, database=database, seed=0, progress=seen.append)
    seconds = time.perf_counter() - start
    row.out.update({"tune s": seconds, "trials": seen[-1].trials_done if seen else 0})
    log.info("%s: tuned in %.0f s", row.case.label, seconds)
    if row.tuned.kernel.key == row.untuned.kernel.key:
        log.info("%s: the tuned schedule compiles to the default schedule's kernel", row.case.label)


def _interleaved_ms(fns: dict[str, Callable], args, repeats: int) -> dict[str, float]:
    """Min over rounds of each function's median; rounds alternate the functions."""
    best = {name: math.inf for name in fns}
    for _ in range(ROUNDS):
        for name, fn in fns.items():
            best[name] = min(best[name], common.median_ms(fn, *args, repeats=repeats))
    return best


def _time(row: Row, repeats: int) -> None:
    case, out = row.case, row.out
    fns = {"TF ms": case.tf_fn}
    if case.xla_fn is not None:
        try:
            _check(case.xla_fn, row.args, row.expected, "XLA vs TF")
            fns["XLA ms"] = case.xla_fn
        except Exception as err:  # XLA may be missing or refuse: the row goes on without it
            _add_error(out, f"XLA: {_short(err)}")
    ops = {"untuned ms": row.untuned}
    if row.tuned is not None:
        try:
            _check(row.tuned, row.args, row.expected, "tuned tftvm vs TF")
            ops["tuned ms"] = row.tuned
        except Exception as err:  # a wrong tuned kernel: report it, time the rest
            _add_error(out, _short(err))
    for key, op in ops.items():
        # As the TF reference is called: eagerly, or inside a tf.function.
        fns[key] = tf.function(lambda *a, op=op: op(*a)) if case.graph else op
    log.info("%s: timing", case.label)
    out.update(_interleaved_ms(fns, row.args, repeats))
    for key in ("tuned", "untuned", "XLA"):
        if f"{key} ms" in out:
            out[f"{key}/TF"] = out[f"{key} ms"] / out["TF ms"]


def run(trials: int | None = None, repeats: int | None = None, database=None,
        quick: bool = False) -> dict[str, list[dict]]:  # fmt: skip
    """Measure every section; section name -> rows (dicts keyed like the printed columns).

    The extra section "tuning" holds the total trials and tuning seconds.
    """
    trials = trials or (QUICK_TRIALS if quick else DEFAULT_TRIALS)
    repeats = repeats or (QUICK_REPEATS if quick else DEFAULT_REPEATS)
    sections = {
        "batch matmul": matmul_cases(QUICK_SHAPES if quick else BLOG_SHAPES + SWEEP_SHAPES),
        "batch matmul + transpose": [] if quick else transpose_cases(TRANSPOSE_SHAPES),
        "fused attention": attention_cases(QUICK_ATTENTION_SHAPES if quick else ATTENTION_SHAPES),
    }
    with contextlib.ExitStack() as stack:
        empty_db = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="attention-empty-db-")))
        reuse = database is not None
        if database is None:
            database = stack.enter_context(tempfile.TemporaryDirectory(prefix="attention-tuning-db-"))
        database = Path(database)
        log.info("tuning database: %s; %d trials per op, %d repeats", database, trials, repeats)
        rows = [_prepare(case, name, empty_db) for name, cases in sections.items() for case in cases]
        for row in (r for r in rows if r.untuned is not None):
            try:
                _tune(row, trials, database, reuse)
            except Exception as err:  # the row keeps its TF and untuned times
                log.error("%s: tuning failed: %s", row.case.label, err)
                _add_error(row.out, f"tuning: {_short(err)}")
            try:
                _time(row, repeats)
            except Exception as err:
                log.error("%s failed: %s", row.case.label, err)
                _add_error(row.out, _short(err))
            # Each row in the log as it ends: a run cut short still leaves its numbers.
            log.info("%s: %s", row.case.label, _brief(row.out))
    results = {name: [r.out for r in rows if r.section == name]
               for name, cases in sections.items() if cases}  # fmt: skip
    tuned = [r.out for r in rows if r.out.get("trials")]
    results["tuning"] = [{"case": f"{len(tuned)} ops tuned", "trials": sum(r["trials"] for r in tuned),
                          "tune s": sum(r["tune s"] for r in tuned)}]  # fmt: skip
    return results


MATMUL_COLUMNS = [("case", ""), ("TF ms", ".3f"), ("untuned ms", ".3f"), ("tuned ms", ".3f"),
                  ("tuned/TF", ".2f"), ("untuned/TF", ".2f"), ("tune s", ".0f"), ("trials", "d")]  # fmt: skip
TUNING_COLUMNS = [("case", ""), ("trials", "d"), ("tune s", ".0f")]
ATTENTION_COLUMNS = [*MATMUL_COLUMNS[:2], ("XLA ms", ".3f"), *MATMUL_COLUMNS[2:5], ("XLA/TF", ".2f"),
                     *MATMUL_COLUMNS[5:]]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int,
                        help=f"tuning trials per op (default {DEFAULT_TRIALS}, quick {QUICK_TRIALS})")
    parser.add_argument("--repeats", type=int,
                        help=f"timed calls per median (default {DEFAULT_REPEATS}, quick {QUICK_REPEATS})")
    parser.add_argument("--database",
                        help="a tuning database directory to reuse and extend (default: a fresh temp dir)")
    parser.add_argument("--quick", action="store_true", help="a few shapes, few trials: a smoke run")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    start = time.perf_counter()
    results = run(args.trials, args.repeats, args.database, args.quick)
    print(common.machine())
    print(f"trials per op: {args.trials or (QUICK_TRIALS if args.quick else DEFAULT_TRIALS)}; "
          f"total run {time.perf_counter() - start:.0f} s")  # fmt: skip
    for name, rows in results.items():
        print(f"\n{name}")
        columns = {"fused attention": ATTENTION_COLUMNS, "tuning": TUNING_COLUMNS}.get(name, MATMUL_COLUMNS)
        common.print_table(rows, columns)
        for row in rows:
            if "error" in row:
                print(f"  {row['case']}: {row['error']}")


if __name__ == "__main__":
    main()
