"""`tftvm.optimize` end to end: TF, TF with XLA, and tftvm on the models of the optimize tests.

    python benchmarks/optimize.py [--quick] [--repeats N] [--warm-cache] [--tune]

For an MLP, a small CNN, MobileNetV2 (32x32) and a Transformer encoder block, all
measured in this run on the same input: median latency of `tf.function(model)`,
`tf.function(model, jit_compile=True)` and `tftvm.optimize(model)` (symbolic batch,
default CPU schedule), their ratios to TF, the XLA first-call time, the
`tftvm.optimize` time (a fresh kernel cache unless --warm-cache), and the share of
compute nodes offloaded. With --tune, the small CNN and the Transformer block are
also optimized for their static batch and every kernel tuned with MetaSchedule
(--trials-per-kernel, capped by --time-budget seconds per model): "static ms" is
that model untuned, "tuned ms" tuned. Each latency is the median of N calls (50; 10
with --quick) after 3 warm-up calls, synced with `.numpy()`.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

if "--warm-cache" not in sys.argv:  # before tftvm is imported: a cold kernel cache
    os.environ["TFTVM_CACHE_DIR"] = tempfile.mkdtemp(prefix="tftvm-bench-")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tftvm  # noqa: E402
from common import machine, median_ms, print_table  # noqa: E402

L = keras.layers


def mlp():
    return keras.Sequential([keras.Input((256,)), L.Dense(512, activation="relu"),
                             L.Dense(512, activation="relu"), L.Dense(10), L.Softmax()]), 32  # fmt: skip


def small_cnn():
    return keras.Sequential([keras.Input((32, 32, 3)), L.Conv2D(16, 3, padding="same", activation="relu"),
                             L.DepthwiseConv2D(3, padding="same"), L.MaxPool2D(),
                             L.Conv2D(32, 3, activation="relu"), L.GlobalAveragePooling2D(),
                             L.Dense(10)]), 8  # fmt: skip


def mobilenet_v2():
    return keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3), classifier_activation=None), 4


def transformer_block():
    inp = keras.Input((10, 32))
    h = L.LayerNormalization()(inp + L.MultiHeadAttention(num_heads=4, key_dim=8)(inp, inp))
    out = L.LayerNormalization()(h + L.Dense(32)(L.Dense(64, activation="gelu")(h)))
    return keras.Model(inp, out), 8


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def row(name, build, repeats, tune: dict | None = None):
    keras.utils.set_random_seed(0)
    model, batch = build()
    shape = tuple(model.inputs[0].shape[1:])
    x = tf.constant(np.random.default_rng(0).standard_normal((batch, *shape)).astype(np.float32))
    tf_fn, xla_fn = tf.function(model), tf.function(model, jit_compile=True)
    want = tf_fn(x).numpy()

    def check(fn):
        np.testing.assert_allclose(fn(x).numpy(), want, rtol=1e-3, atol=1e-3 * np.abs(want).max())

    _, xla_compile = timed(lambda: xla_fn(x).numpy())
    cells = {"model": name, "TF ms": median_ms(tf_fn, x, repeats=repeats), "XLA ms": median_ms(xla_fn, x, repeats=repeats),
             "XLA compile s": xla_compile}  # fmt: skip
    try:
        fast, compile_s = timed(lambda: tftvm.optimize(model, input_signature=[tf.TensorSpec([None, *shape])]))
        check(fast)
        cells.update({"tftvm ms": median_ms(fast, x, repeats=repeats), "tftvm compile s": compile_s,
                      "offloaded": fast.report().splitlines()[0].split("(")[-1].rstrip(")")})  # fmt: skip
        if tune is not None:
            static = tftvm.optimize(model, input_signature=[tf.TensorSpec(x.shape)])
            trials = tune["trials_per_kernel"] * len(static.kernels())
            tuned, tune_s = timed(lambda: tftvm.tune(static, trials=trials, database=tempfile.mkdtemp(),
                                                     time_budget=tune["time_budget"], seed=0))  # fmt: skip
            check(tuned)
            cells.update({"static ms": median_ms(static, x, repeats=repeats),
                          "tuned ms": median_ms(tuned, x, repeats=repeats), "tune s": tune_s,
                          "kernels": len(static.kernels()), "trials": trials})  # fmt: skip
    except Exception as err:  # a failing model is a row with its error, not a hidden one
        cells["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"
    for key in ("XLA ms", "tftvm ms", "static ms", "tuned ms"):
        if key in cells:
            cells[key.split()[0] + "/TF"] = cells[key] / cells["TF ms"]
    return cells


MODELS = [("MLP (b32)", mlp, False), ("small CNN (b8)", small_cnn, True),
          ("MobileNetV2 32px (b4)", mobilenet_v2, False), ("Transformer block (b8)", transformer_block, True)]  # fmt: skip
COLUMNS = [("model", ""), ("TF ms", ".3f"), ("XLA ms", ".3f"), ("tftvm ms", ".3f"), ("XLA/TF", ".2f"),
           ("tftvm/TF", ".2f"), ("tftvm compile s", ".1f"), ("XLA compile s", ".2f"), ("offloaded", "")]  # fmt: skip
TUNED_COLUMNS = [("model", ""), ("TF ms", ".3f"), ("static ms", ".3f"), ("tuned ms", ".3f"), ("static/TF", ".2f"),
                 ("tuned/TF", ".2f"), ("kernels", "d"), ("trials", "d"), ("tune s", ".0f")]  # fmt: skip


def run(repeats: int = 50, tune: dict | None = None) -> list[dict]:
    """One row per model; `tune` ({"trials_per_kernel", "time_budget"}) adds tuned columns."""
    return [row(name, build, repeats, tune if tunable else None) for name, build, tunable in MODELS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, help="timed calls per measurement (default 50, 10 with --quick)")
    parser.add_argument("--quick", action="store_true", help="10 timed calls instead of 50")
    parser.add_argument("--warm-cache", action="store_true", help="reuse the kernel disk cache")
    parser.add_argument("--tune", action="store_true", help="also tune the CNN and the Transformer block")
    parser.add_argument("--trials-per-kernel", type=int, default=32)
    parser.add_argument("--time-budget", type=float, default=900.0, help="tuning seconds per model")
    args = parser.parse_args()
    args.repeats = args.repeats or (10 if args.quick else 50)
    tune = {"trials_per_kernel": args.trials_per_kernel, "time_budget": args.time_budget} if args.tune else None
    print(f"{machine()}; batch as listed; median of {args.repeats}\n")
    rows = run(args.repeats, tune)
    print_table([r for r in rows if "error" not in r], COLUMNS)
    if tune:
        print()
        print_table([r for r in rows if "tuned ms" in r], TUNED_COLUMNS)
    for r in rows:
        if "error" in r:
            print(f"{r['model']}: tftvm failed: {r['error']}")


if __name__ == "__main__":
    main()
