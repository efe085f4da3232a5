"""Dispatch overhead: a tftvm elementwise add vs TF's own tf.add, same run, same inputs.

    python benchmarks/overhead.py [--repeats N]

Prints median times and the ratio tftvm/TF, eager and in tf.function, for a
1-element tensor and a 64 MiB tensor (float32). The target is a ratio <= 1.10.
"""
from __future__ import annotations

import argparse
import platform
import time

import numpy as np
import tensorflow as tf
import tftvm
from tvm import te


def make_add():
    n = te.var("n")
    a = te.placeholder((n,), "float32", name="a")
    b = te.placeholder((n,), "float32", name="b")
    return tftvm.op([a, b], [te.compute((n,), lambda i: a[i] + b[i], name="c")], name="add")


def median_seconds(fn, repeats: int, inner: int) -> float:
    for _ in range(max(3, inner)):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - start) / inner)
    return float(np.median(samples))


def run(repeats: int = 21) -> list[dict]:
    """One row per (size, mode): TF and tftvm seconds, best of 3 interleaved medians."""
    add = make_add()
    # The same Python wrapper around both, so only the op inside differs.
    graph_tf = tf.function(lambda x, y: tf.add(x, y))
    graph_tvm = tf.function(lambda x, y: add(x, y))
    rows = []
    for label, n, inner in (("1 element", 1, 2000), ("64 MiB", 16 << 20, 3)):
        x, y = tf.random.uniform([n]), tf.random.uniform([n])
        np.testing.assert_array_equal(add(x, y).numpy(), tf.add(x, y).numpy())
        for mode, f_tf, f_tvm in (("eager", tf.add, add), ("tf.function", graph_tf, graph_tvm)):
            # Interleave the two so drift in machine load hits both alike.
            t_tf, t_tvm = [], []
            for _ in range(3):
                t_tf.append(median_seconds(lambda: f_tf(x, y), repeats, inner))
                t_tvm.append(median_seconds(lambda: f_tvm(x, y), repeats, inner))
            rows.append({"case": f"add {label}, {mode}", "TF µs": min(t_tf) * 1e6, "tftvm µs": min(t_tvm) * 1e6,
                         "tftvm/TF": min(t_tvm) / min(t_tf)})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    rows = run(args.repeats)
    print(f"{platform.processor() or platform.machine()}, {tf.config.threading.get_intra_op_parallelism_threads() or 'default'} intra-op threads, "
          f"TF {tf.__version__}, tftvm {tftvm.__version__}")  # fmt: skip
    print(f"{'case':<28}{'TF µs':>11}{'tftvm µs':>11}{'tftvm/TF':>10}")
    for r in rows:
        print(f"{r['case']:<28}{r['TF µs']:>11.1f}{r['tftvm µs']:>11.1f}{r['tftvm/TF']:>10.2f}")


if __name__ == "__main__":
    main()
