"""
Tuning with MetaSchedule, and reusing the records
=================================================

``tftvm.tune`` searches schedules for an op's kernel with TVM's MetaSchedule,
keeps the measured records in a database directory, and later ops built with
that ``database=`` compile the best record instead of the default schedule.

Needs MetaSchedule's packages: ``pip install -e ".[tune]"``. This tutorial tunes
for a few trials only, to finish in about a minute; real tuning uses hundreds
(``benchmarks/attention.py`` uses 64 per kernel).
"""

# %%
# An op to tune
# -------------
# A 256x256x256 matmul. tftvm compiles it with its default CPU schedule first.
import logging
import tempfile
import time

import numpy as np
import tensorflow as tf
import tftvm
from tvm import te

N = 256
A = te.placeholder((N, N), "float32", name="A")
B = te.placeholder((N, N), "float32", name="B")
r = te.reduce_axis((0, N), "r")
C = te.compute((N, N), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
matmul = tftvm.op([A, B], [C], name="matmul256")

rng = np.random.default_rng(0)
a, b = (tf.constant(rng.standard_normal((N, N)).astype(np.float32)) for _ in range(2))


def median_ms(f, calls=20):
    f(a, b)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        f(a, b)
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


# %%
# Tune
# ----
# ``trials`` is the number of candidate schedules compiled and measured.
# ``progress`` is called after each measured batch (here it logs; the CLI
# draws a bar). ``time_budget`` (seconds) stops the search early. Before it
# returns, tune checks the fastest records against the default schedule on
# random inputs and drops any that compute something else.
logging.basicConfig(level=logging.WARNING)
database = tempfile.mkdtemp(prefix="tuning-")


def show(progress):
    best = min(progress.best_ms.values(), default=float("nan"))
    print(f"  {progress.trials_done}/{progress.trials} trials, {progress.elapsed_s:.0f} s, best {best:.3f} ms")


start = time.perf_counter()
tuned = tftvm.tune(matmul, trials=16, database=database, time_budget=90, progress=show, seed=0)
print(f"tuned in {time.perf_counter() - start:.0f} s; records in {database}")
np.testing.assert_allclose(tuned(a, b), tf.linalg.matmul(a, b), rtol=1e-4, atol=1e-3)

# %%
# Reuse the database
# ------------------
# Another process (or this one, later) builds the op with ``database=`` (or sets
# ``TFTVM_TUNING_DB``) and gets the tuned kernel without searching again.
again = tftvm.op([A, B], [C], name="matmul256", database=database)
assert again.kernel.key == tuned.kernel.key, "the database gave a different kernel"
print("a new op with database= compiles the tuned schedule")

tf_ms, untuned_ms, tuned_ms = median_ms(tf.linalg.matmul), median_ms(matmul), median_ms(again)
print(f"256x256x256 matmul: TF {tf_ms:.3f} ms, tftvm untuned {untuned_ms:.3f} ms, "
      f"tftvm tuned (16 trials) {tuned_ms:.3f} ms")  # fmt: skip

# %%
# What you should see: a few progress lines, the tuned op matching TF, and the
# three timings. The tuned kernel is never slower than the default schedule (tune
# measures the default schedule as one of its candidates); whether either beats
# TF's oneDNN matmul depends on the shape and the number of trials: see
# ``benchmarks/RESULTS.md`` for the NMT shapes at 64 trials.
