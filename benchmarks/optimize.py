"""`tftvm.optimize` end to end: TF, TF with XLA, and tftvm on the models of the optimize tests.

    python benchmarks/optimize.py [--quick] [--repeats N] [--warm-cache]

For an MLP, a small CNN, MobileNetV2 (32x32) and a Transformer encoder block, all
measured in this run on the same input: median latency of `tf.function(model)`,
`tf.function(model, jit_compile=True)` and `tftvm.optimize(model)` (symbolic batch),
their ratios to TF, the XLA first-call time, the `tftvm.optimize` time (a fresh
kernel cache unless --warm-cache), and the share of compute nodes offloaded.
tftvm kernels are untuned here (the default CPU schedule). Each latency is the median
of N calls (50; 10 with --quick) after 3 warm-up calls, synced with `.numpy()`.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

if "--warm-cache" not in sys.argv:  # before tftvm is imported: a cold kernel cache
    os.environ["TFTVM_CACHE_DIR"] = tempfile.mkdtemp(prefix="tftvm-bench-")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tftvm  # noqa: E402

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


def median_ms(fn, x, repeats: int) -> float:
    for _ in range(3):
        fn(x).numpy()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(x).numpy()
        samples.append(time.perf_counter() - start)
    return 1e3 * float(np.median(samples))


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def row(name, build, repeats):
    keras.utils.set_random_seed(0)
    model, batch = build()
    shape = tuple(model.inputs[0].shape[1:])
    x = tf.constant(np.random.default_rng(0).standard_normal((batch, *shape)).astype(np.float32))
    tf_fn, xla_fn = tf.function(model), tf.function(model, jit_compile=True)
    want = tf_fn(x).numpy()
    _, xla_compile = timed(lambda: xla_fn(x).numpy())
    cells = {"model": name, "TF ms": median_ms(tf_fn, x, repeats), "XLA ms": median_ms(xla_fn, x, repeats),
             "XLA compile s": xla_compile}  # fmt: skip
    try:
        fast, compile_s = timed(lambda: tftvm.optimize(model, input_signature=[tf.TensorSpec([None, *shape])]))
        np.testing.assert_allclose(fast(x).numpy(), want, rtol=1e-3, atol=1e-3 * np.abs(want).max())
        cells.update({"tftvm ms": median_ms(fast, x, repeats), "tftvm compile s": compile_s,
                      "offloaded": fast.report().splitlines()[0].split("(")[-1].rstrip(")")})  # fmt: skip
    except Exception as err:  # a failing model is a row with its error, not a hidden one
        cells["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, help="timed calls per measurement (default 50, 10 with --quick)")
    parser.add_argument("--quick", action="store_true", help="10 timed calls instead of 50")
    parser.add_argument("--warm-cache", action="store_true", help="reuse the kernel disk cache")
    args = parser.parse_args()
    args.repeats = args.repeats or (10 if args.quick else 50)
    import tvm

    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; TF {tf.__version__}, "
          f"TVM {tvm.__version__}; batch as listed; untuned tftvm; median of {args.repeats}\n")  # fmt: skip
    header = f"{'model':<22}{'TF ms':>9}{'XLA ms':>9}{'tftvm ms':>10}{'tftvm/TF':>10}{'XLA/TF':>8}" \
             f"{'tftvm compile s':>17}{'XLA compile s':>15}{'offloaded':>11}"
    print(header)
    for name, build in [("MLP (b32)", mlp), ("small CNN (b8)", small_cnn),
                        ("MobileNetV2 32px (b4)", mobilenet_v2), ("Transformer block (b8)", transformer_block)]:  # fmt: skip
        c = row(name, build, args.repeats)
        if "error" in c:
            print(f"{name:<22}{c['TF ms']:>9.3f}{c['XLA ms']:>9.3f}  tftvm failed: {c['error']}")
            continue
        print(f"{name:<22}{c['TF ms']:>9.3f}{c['XLA ms']:>9.3f}{c['tftvm ms']:>10.3f}"
              f"{c['tftvm ms'] / c['TF ms']:>10.2f}{c['XLA ms'] / c['TF ms']:>8.2f}"
              f"{c['tftvm compile s']:>17.1f}{c['XLA compile s']:>15.2f}{c['offloaded']:>11}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
