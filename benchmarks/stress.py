"""Reliability under abuse: fuzzed calls, many threads, long runs, random graphs; bounded in time.

    python benchmarks/stress.py [--quick] [--cases N] [--threads T] [--calls M]
                                [--eager N] [--graph N] [--part fuzz|threads|leaks|graphs]
    python benchmarks/stress.py --replay FILE

Each part runs in a child process of its own, so a crash is counted and reported
instead of ending the run. Printed: cases tried and how each ended, threads x calls
checked against NumPy, RSS / loaded modules / open files before and after the
long runs, random TF graphs (N of them, graph_fuzz.py) run through TF, optimize,
compile_model and enable() with every difference from TF listed, and the number of
crashes. Exits 1 if anything crashed or was wrong. `--replay FILE` runs the graphs a run
listed with a difference (FILE: its printed output, or the JSON lines it keeps beside a
crashed child) again, each alone, and says which still differ (exit 1 if any does).
The tests run each part small (tests/test_reliability.py).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# What a bad call may raise: a clean error, never a crash or a wrong answer.
CLEAN_ERRORS = ("TypeError", "ValueError", "InvalidArgumentError", "ResourceExhaustedError")


def make_ops():
    """Ops with symbolic dims, several dtypes, several outputs, and scalar inputs."""
    import tftvm
    from tvm import te
    from tvm.script import tirx as T

    n, k, m = te.var("n"), te.var("k"), te.var("m")
    A = te.placeholder((n, 64), "float32", name="A")
    B = te.placeholder((64,), "float32", name="B")
    C = te.compute((n, 64), lambda i, j: A[i, j] + B[j], name="C")
    r = te.reduce_axis((0, 64), "r")
    D = te.compute((n,), lambda i: te.sum(C[i, r], axis=r), name="D")
    X = te.placeholder((n, k), "float64", name="X")
    Y = te.placeholder((k, m), "float64", name="Y")
    s = te.reduce_axis((0, k), "s")
    Z = te.compute((n, m), lambda i, j: te.sum(X[i, s] * Y[s, j], axis=s), name="Z")
    I = te.placeholder((n,), "int32", name="I")
    J = te.placeholder((n,), "int32", name="J")
    P = te.placeholder((n,), "bool", name="P")
    Q = te.placeholder((n,), "bool", name="Q")

    @T.prim_func
    def fill(count: T.int64, value: T.float32, b: T.handle):
        out = T.match_buffer(b, (count, 4), "float32")
        for i, j in T.grid(count, 4):
            out[i, j] = value

    return {
        "add_bias": (tftvm.op([A, B], [C, D], name="add_bias"), lambda a, b: (a + b, (a + b).sum(1))),
        "matmul_f64": (tftvm.op([X, Y], [Z], name="matmul_f64"), lambda x, y: x @ y),
        "add_i32": (tftvm.op([I, J], [te.compute((n,), lambda i: I[i] + J[i], name="K")], name="add_i32"),
                    lambda i, j: i + j),
        "and_bool": (tftvm.op([P, Q], [te.compute((n,), lambda i: P[i] & Q[i], name="R")], name="and_bool"),
                     lambda p, q: p & q),
        "fill": (tftvm.op(fill), lambda count, value: np.full((int(count), 4), value, np.float32)),
    }  # fmt: skip


def _equal(got, want) -> bool:
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    if len(got) != len(want):
        return False
    for g, w in zip(got, want):
        g, w = g.numpy(), np.asarray(w).astype(g.numpy().dtype)
        same = np.allclose(g, w, rtol=1e-5, atol=1e-4, equal_nan=True) if g.dtype.kind == "f" else np.array_equal(g, w)
        if g.shape != w.shape or not same:
            return False
    return True


# ---------------------------------------------------------------------------
# 1. Fuzzing: random argument counts, ranks, dims, dtypes and kinds
# ---------------------------------------------------------------------------


def fuzz(cases: int, seed: int, progress_file: str) -> dict:
    import hypothesis
    import tensorflow as tf
    from hypothesis import strategies as st

    ops = make_ops()
    dtypes = ["float16", "bfloat16", "float32", "float64", "int8", "int32", "int64", "uint8", "bool"]
    dims = st.sampled_from([0, 1, 2, 3, 5, 64, 65])
    counts = {"result": 0, "clean error": 0}
    errors: dict[str, int] = {}

    def dense(dtype, shape):
        if dtype == "bool":
            return np.random.default_rng(0).integers(0, 2, shape).astype(bool)
        values = np.random.default_rng(len(shape)).standard_normal(shape) * 3
        return values.astype(np.float32 if dtype == "bfloat16" else dtype)

    @st.composite
    def argument(draw, want_dtype, want_rank):
        kind = draw(st.sampled_from(["tensor", "tensor", "numpy", "list", "python", "none", "string",
                                     "ragged", "sparse", "huge"]))  # fmt: skip
        dtype = draw(st.sampled_from([want_dtype] * 4 + dtypes))
        rank = draw(st.sampled_from([want_rank] * 3 + [0, 1, 2, 3]))
        shape = tuple(draw(dims) for _ in range(rank))
        if kind == "none":
            return None
        if kind == "string":
            return "not a tensor"
        if kind == "python":
            return draw(st.one_of(st.integers(-(2**20), 2**20), st.floats(allow_nan=True), st.booleans()))
        if kind == "huge":  # a dim of 2**35 with no elements, or a size no memory holds
            # (an output it sizes exceeds RAM + swap, so allocating it fails: ResourceExhausted)
            return tf.zeros([0, 2**35], dtype) if rank else tf.constant(2**45, tf.int64)
        if kind in ("ragged", "sparse"):
            flat = tf.range(5, dtype=tf.float32)
            return tf.RaggedTensor.from_row_lengths(flat, [2, 3]) if kind == "ragged" else tf.sparse.from_dense(flat)
        x = dense(dtype, shape)
        if kind == "numpy":
            return x
        if kind == "list":
            return x.tolist()
        return tf.constant(x, dtype=dtype)

    @st.composite
    def valid_call(draw, name):
        """Arguments that fit the signature: every variable set, dtypes right."""
        from tftvm.signature import evaluate_dim

        sig = ops[name][0].signature
        values = [draw(st.integers(0, 6)) for _ in sig.var_names]
        args = []
        for t in sig.inputs:
            if t.scalar:
                args.append(values[t.binds] if t.binds >= 0 else draw(st.floats(-10, 10, width=32)))
                continue
            x = dense(t.dtype, tuple(evaluate_dim(d, values) for d in t.dims))
            args.append(x if draw(st.booleans()) else tf.constant(x, dtype=t.dtype))
        return name, args, True

    @st.composite
    def call(draw):
        name = draw(st.sampled_from(sorted(ops)))
        if draw(st.integers(0, 9)) < 4:
            return draw(valid_call(name))
        op, _ = ops[name]
        sig = op.signature
        n_args = draw(st.sampled_from([len(sig.inputs)] * 6 + [0, len(sig.inputs) - 1, len(sig.inputs) + 1]))
        args = []
        for i in range(max(n_args, 0)):
            t = sig.inputs[min(i, len(sig.inputs) - 1)]
            args.append(draw(argument(t.dtype, len(t.dims))))
        return name, args, False

    @hypothesis.settings(max_examples=cases, deadline=None, database=None, derandomize=seed == 0,
                         suppress_health_check=list(hypothesis.HealthCheck))  # fmt: skip
    @hypothesis.given(call())
    def one_call(case):
        name, args, valid = case
        with open(progress_file, "w") as f:  # what ran last, if this process dies
            f.write(f"{name}({', '.join(_describe(a) for a in args)})")
        op, reference = ops[name]
        try:
            got = op(*args)
        except Exception as err:  # noqa: BLE001  sorted below: clean errors or a failure
            kind = type(err).__name__
            if valid:
                raise AssertionError(f"{name}: a valid call was refused: {kind}: {err}") from err
            if kind not in CLEAN_ERRORS:
                raise AssertionError(f"{name}: unexpected {kind}: {err}") from err
            counts["clean error"] += 1
            errors[kind] = errors.get(kind, 0) + 1
            return
        # The op accepted the arguments: convert them as it does (TF's conversion rules).
        inputs = [tf.convert_to_tensor(a, dtype=t.dtype).numpy() for a, t in zip(args, op.signature.inputs)]
        inputs = [x.astype(np.float32) if x.dtype.name == "bfloat16" else x for x in inputs]
        want = reference(*inputs)
        if not _equal(got, want):
            raise AssertionError(f"{name}: wrong result for {[x.shape for x in inputs]}")
        counts["result"] += 1

    one_call()
    return {"cases": sum(counts.values()), **counts, "errors by type": errors}


def _describe(a) -> str:
    if hasattr(a, "shape") and hasattr(a, "dtype"):
        return f"{type(a).__name__}{tuple(a.shape)}:{getattr(a.dtype, 'name', a.dtype)}"
    return repr(a)[:40]


# ---------------------------------------------------------------------------
# 2. Threads: several ops, different shapes, results checked
# ---------------------------------------------------------------------------


def threads(n_threads: int, calls: int) -> dict:
    """Eager op calls, a tf.function of independent calls, and a tftvm.optimize model, per thread."""
    import concurrent.futures

    import tensorflow as tf

    import keras
    import tftvm

    ops = make_ops()
    add_bias, matmul, add_i32 = ops["add_bias"][0], ops["matmul_f64"][0], ops["add_i32"][0]
    keras.utils.set_random_seed(0)
    mlp = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(4)])
    fast = tftvm.optimize(mlp, input_signature=[tf.TensorSpec([None, 16])])  # the graph-integration path too

    @tf.function(input_signature=[tf.TensorSpec([None, 64]), tf.TensorSpec([64]),
                                  tf.TensorSpec([None, None], tf.float64), tf.TensorSpec([None, None], tf.float64)])
    def graph(x, b, p, q):  # independent calls TF may run in parallel (inter-op threads)
        return [add_bias(x, b)[1], matmul(p, q), add_bias(x * 2.0, b)[1], matmul(q, p)]

    def work(t: int) -> int:
        rng = np.random.default_rng(t)
        for c in range(calls):
            n = 1 + (t * 7 + c) % 13
            x, b = rng.standard_normal((n, 64)).astype(np.float32), rng.standard_normal(64).astype(np.float32)
            p, q = rng.standard_normal((n, n)), rng.standard_normal((n, n))
            i, j = rng.integers(-9, 9, n).astype(np.int32), rng.integers(-9, 9, n).astype(np.int32)
            assert _equal(add_bias(x, b), (x + b, (x + b).sum(1)))
            assert _equal(matmul(p, q), p @ q)
            assert _equal(add_i32(i, j), i + j)
            outs = graph(x, b, p, q)
            assert _equal(outs, [(x + b).sum(1), p @ q, (2 * x + b).sum(1), q @ p])
            h = rng.standard_normal((n, 16)).astype(np.float32)
            assert _equal(fast(h), mlp(h).numpy())
        return calls

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(n_threads) as pool:
        done = sum(pool.map(work, range(n_threads)))
    return {"threads": n_threads, "calls per thread": calls, "checked calls": done * 5,
            "inter-op threads": tf.config.threading.get_inter_op_parallelism_threads(),
            "seconds": round(time.perf_counter() - start, 1)}  # fmt: skip


# ---------------------------------------------------------------------------
# 3. Leaks: many eager and graph calls; memory, modules and files before and after
# ---------------------------------------------------------------------------


def leaks(eager: int, graph: int) -> dict:
    import psutil
    import tensorflow as tf
    import tvm_ffi

    ops = make_ops()
    add_bias = ops["add_bias"][0]
    proc = psutil.Process()
    modules = tvm_ffi.get_global_func("tftvm.num_modules")
    x, b = tf.random.normal([8, 64]), tf.random.normal([64])
    f = tf.function(lambda x, b: add_bias(x, b))

    def state():
        return {"rss_mib": proc.memory_info().rss / 2**20, "modules": int(modules()), "open_files": proc.num_fds()}

    for _ in range(2000):  # warm-up: TF's and TVM's caches and pools fill here
        add_bias(x, b)
        f(x, b)
    before = state()
    start = time.perf_counter()
    for _ in range(eager):
        add_bias(x, b)
    eager_s = time.perf_counter() - start
    for _ in range(graph):
        f(x, b)
    after = state()
    assert _equal(add_bias(x, b), (x.numpy() + b.numpy(), (x.numpy() + b.numpy()).sum(1)))
    return {"eager calls": eager, "graph calls": graph, "eager µs per call": round(1e6 * eager_s / max(eager, 1), 1),
            "before": {k: round(v, 1) for k, v in before.items()},
            "after": {k: round(v, 1) for k, v in after.items()},
            "rss growth MiB": round(after["rss_mib"] - before["rss_mib"], 1)}  # fmt: skip


# ---------------------------------------------------------------------------
# 4. Graphs: random TF graphs through TF and tftvm's three paths (graph_fuzz.py)
# ---------------------------------------------------------------------------


PROGRESS_MARK = "# graph "  # the progress file's first line: how many graphs this one makes
FOUND_SUFFIX = ".found"  # beside the progress file: the differences found so far, a JSON line each


def graphs(count: int, seed: int, progress_file: str | None, batch: int = 0) -> dict:
    """`count` random graphs (hypothesis, generation only: every difference is listed, none
    stops the run; tests/test_graph_fuzz.py shrinks the ones it finds). Batch 0 draws from
    `seed`, batch i from "seed/i"."""
    import logging

    import graph_fuzz
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    logging.getLogger("tftvm").setLevel(logging.ERROR)  # refused converters say why: expected here
    graph_fuzz.ops()
    found, ran = [], [0]

    @hypothesis_seed(seed if batch == 0 else f"{seed}/{batch}")
    @settings(max_examples=count, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(graph_fuzz.cases())
    def run(case):
        recipe, feeds = case
        ran[0] += 1
        if progress_file:
            with open(progress_file, "w") as f:
                f.write(f"{PROGRESS_MARK}{ran[0]}\n{recipe}")
        differences = graph_fuzz.differences(recipe, feeds)
        if differences:
            found.append({"graph": str(recipe), "feeds": [a.tolist() for a in feeds], "differences": differences})
            if progress_file:  # kept if this process dies later
                with open(progress_file + FOUND_SUFFIX, "a") as f:
                    f.write(json.dumps(found[-1]) + "\n")

    start = time.perf_counter()
    run()
    return {"graphs": ran[0], "with differences": len(found), "seconds": round(time.perf_counter() - start, 1),
            "differences": found[:20]}  # fmt: skip


# ---------------------------------------------------------------------------


# Random graphs per child process: each compiled model's library stays loaded (TVM never
# unloads one), and a process holds at most vm.max_map_count (65530) mappings, some five a
# library: about ten thousand graphs in one process aborted it.
GRAPHS_PER_CHILD = 2000


def run_graphs(args) -> dict:
    """The graphs part in children of GRAPHS_PER_CHILD graphs each, their results summed."""
    results = []
    for batch, start in enumerate(range(0, args.cases, GRAPHS_PER_CHILD)):
        results.append(run_part("graphs", args, cases=min(GRAPHS_PER_CHILD, args.cases - start), batch=batch))
        done = results[-1]
        print(f"graphs {start + 1}-{start + done.get('graphs', done.get('graphs before', 0))} of {args.cases}: "
              f"{done.get('with differences', len(done.get('differences before', [])))} with differences, "
              f"{done['crashes']} crashes", flush=True)  # fmt: skip
    if len(results) == 1:
        return results[0]
    total = {"part": "graphs", "children": len(results), "crashes": sum(r["crashes"] for r in results)}
    total["graphs"] = sum(r.get("graphs", r.get("graphs before", 0)) for r in results)
    total["with differences"] = sum(r.get("with differences", len(r.get("differences before", []))) for r in results)
    total["seconds"] = round(sum(r.get("seconds", 0) for r in results), 1)
    total["differences"] = [d for r in results for d in r.get("differences", r.get("differences before", []))]
    failed = [r for r in results if r.get("failed") or r["crashes"]]
    if failed:
        total["failed"] = any(r.get("failed") for r in failed)
        total["failed children"] = [{k: v for k, v in r.items() if k not in ("differences", "differences before")}
                                    for r in failed]  # fmt: skip
    return total


def run_part(part: str, args, cases: int | None = None, batch: int = 0) -> dict:
    """Run one part in a child process; a crash there is reported, not fatal here."""
    with tempfile.NamedTemporaryFile("r", suffix=".case") as progress:
        cmd = [sys.executable, __file__, "--child", part, "--cases", str(args.cases if cases is None else cases),
               "--batch", str(batch), "--seed", str(args.seed),
               "--threads", str(args.threads), "--calls", str(args.calls), "--eager", str(args.eager),
               "--graph", str(args.graph), "--progress-file", progress.name]  # fmt: skip
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        child = subprocess.run(cmd, capture_output=True, text=True, env=env)
        last = progress.read()
        found_path = Path(progress.name + FOUND_SUFFIX)
        found = [json.loads(line) for line in found_path.read_text().splitlines()] if found_path.exists() else []
        found_path.unlink(missing_ok=True)
    lines = [ln for ln in child.stdout.splitlines() if ln.startswith("RESULT ")]
    if child.returncode == 0 and lines:
        return {"part": part, "crashes": 0, **json.loads(lines[-1][7:])}
    if lines:  # the part finished and printed its result, then the process died on its way out
        return {"part": part, "crashes": 1, "crashed": "at exit, after its result", "exit status": child.returncode,
                **json.loads(lines[-1][7:]), "stderr": child.stderr[-1000:]}  # fmt: skip
    crashed = child.returncode < 0  # killed by a signal: a segfault or an abort
    result = {"part": part, "crashes": int(crashed), "failed": not crashed, "exit status": child.returncode,
              "last case": last, "stderr": child.stderr[-3000:]}  # fmt: skip
    if last.startswith(PROGRESS_MARK):  # the graphs run before this one, each with TF's answer or listed
        result["graphs before"] = int(last.splitlines()[0][len(PROGRESS_MARK):]) - 1
        result["differences before"] = found
    return result


def replay(path: str) -> int:
    """Run again each graph with a difference listed in file `path`; 1 if any still differs."""
    import logging

    import graph_fuzz

    logging.getLogger("tftvm").setLevel(logging.ERROR)
    listed = _listed(Path(path).read_text())
    still = 0
    for case in listed:
        recipe = graph_fuzz.Recipe.parse(case["graph"])
        differences = graph_fuzz.differences(recipe, recipe.feeds(case["feeds"]))
        still += bool(differences)
        print(f"{recipe}\nfeeds: {case['feeds']}\n" + ("\n".join(differences) or "now TF's answer on every path") + "\n")
    print(f"{len(listed)} listed graphs replayed, {still} still differ from TF")
    return 1 if still else 0


def _listed(text: str) -> list[dict]:
    """The differences (dicts with "graph" and "feeds") in a run's printed output (its JSON
    objects) or in JSON lines, one difference a line."""
    decoder, found, i = json.JSONDecoder(), [], 0
    while (i := text.find("{", i)) != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i += 1
            continue
        i = end
        if "graph" in obj:
            found.append(obj)
        found += [d for key in ("differences", "differences before") for d in obj.get(key, []) if isinstance(d, dict)]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke run")
    parser.add_argument("--part", choices=["fuzz", "threads", "leaks", "graphs"], action="append", help="only these parts")
    parser.add_argument("--cases", type=int, default=2000, help="fuzzed calls (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="0: the same cases every run")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--calls", type=int, default=200, help="calls per thread, each checked")
    parser.add_argument("--eager", type=int, default=100_000, help="eager calls for the leak check")
    parser.add_argument("--graph", type=int, default=10_000, help="tf.function calls for the leak check")
    parser.add_argument("--replay", metavar="FILE", help="run the graphs FILE lists with a difference again")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--progress-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.replay:
        return replay(args.replay)
    if args.quick:
        args.cases, args.calls, args.eager, args.graph = 200, 20, 10_000, 1_000
    if args.child:
        if args.child == "threads":
            import tensorflow as tf

            tf.config.threading.set_inter_op_parallelism_threads(4)
        result = {"fuzz": lambda: fuzz(args.cases, args.seed, args.progress_file),
                  "graphs": lambda: graphs(args.cases, args.seed, args.progress_file, args.batch),
                  "threads": lambda: threads(args.threads, args.calls),
                  "leaks": lambda: leaks(args.eager, args.graph)}[args.child]()  # fmt: skip
        print("RESULT " + json.dumps(result))
        return 0
    results = [run_graphs(args) if part == "graphs" else run_part(part, args)
               for part in args.part or ["fuzz", "threads", "leaks", "graphs"]]  # fmt: skip
    for r in results:
        print(json.dumps(r, indent=1, ensure_ascii=False))
    crashes = sum(r["crashes"] for r in results)
    print(f"crashes: {crashes}; failed parts: {sum(bool(r.get('failed')) for r in results)}")
    wrong = sum(r.get("with differences", 0) for r in results)
    print(f"graphs with differences from TF: {wrong}")
    return 1 if crashes or wrong or any(r.get("failed") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
