"""A tftvm op inside an XLA-compiled function, against the same function without XLA.

    python benchmarks/xla.py [--rows R] [--repeats N]

The function is a Transformer MLP's activation step: x @ W, then bias + GELU (a tftvm op,
or TF's own ops), then a residual add. Four ways, timed interleaved in one process (median
of N rounds): TF, TF with jit_compile, the tftvm op in a plain tf.function, and the tftvm op
in a jit_compile function (TvmCall as an XLA custom call). Ratios are to TF.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def bias_gelu_op(width: int):
    import tftvm
    from tvm import te, tirx, topi

    n = tirx.Var("n", "int64")
    x = te.placeholder((n, width), "float32", name="x")
    b = te.placeholder((width,), "float32", name="b")
    v = te.compute((n, width), lambda i, j: x[i, j] + b[j], name="biased")
    erf = topi.fast_erf(te.compute((n, width), lambda i, j: v[i, j] * 0.7071067811865476, name="scaled"))
    y = te.compute((n, width), lambda i, j: 0.5 * v[i, j] * (1.0 + erf[i, j]), name="bias_gelu")
    return tftvm.op([x, b], [y], name="bias_gelu")  # TOPI's fast erf, as tftvm's converter uses


def main() -> None:
    import tensorflow as tf

    from common import machine, markdown_table, print_table

    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((args.rows, args.width)).astype(np.float32))
    w = tf.constant(rng.standard_normal((args.width, args.width)).astype(np.float32) / 32)
    b = tf.constant(rng.standard_normal(args.width).astype(np.float32))
    op = bias_gelu_op(args.width)

    def with_tf(x):
        return tf.nn.gelu(tf.matmul(x, w) + b, approximate=False) + x

    def with_tftvm(x):
        return op(tf.matmul(x, w), b) + x

    ways = {"TF": tf.function(with_tf), "TF + XLA": tf.function(with_tf, jit_compile=True),
            "tftvm op": tf.function(with_tftvm), "tftvm op + XLA": tf.function(with_tftvm, jit_compile=True)}  # fmt: skip
    want = ways["TF"](x).numpy()
    errors = {k: float(np.max(np.abs(f(x).numpy() - want))) for k, f in ways.items()}
    samples = {k: [] for k in ways}
    for _ in range(args.repeats):
        for k, f in ways.items():
            start = time.perf_counter()
            f(x).numpy()
            samples[k].append(time.perf_counter() - start)
    ms = {k: 1e3 * float(np.median(v)) for k, v in samples.items()}
    rows = [{"way": k, "ms": f"{ms[k]:.3f}", "/TF": f"{ms[k] / ms['TF']:.2f}", "max abs error": f"{errors[k]:.1e}"}
            for k in ways]  # fmt: skip
    columns = [("way", "way"), ("ms", "ms"), ("/TF", "/TF"), ("max abs error", "max abs error")]
    print(machine())
    print(f"x @ W -> bias + GELU -> + x, x [{args.rows}, {args.width}], medians of {args.repeats} interleaved rounds")
    print_table(rows, columns)
    print(markdown_table(rows, columns))


if __name__ == "__main__":
    main()
