"""Keras training steps with and without `tftvm.enable()`, same run, same data.

    python benchmarks/fit.py [--models A,B] [--batch N] [--repeats N] [--markdown FILE]

For each model, two copies with the same initial weights train on the same batches:
one as TF runs it, one under `tftvm.enable()` (the pass rewrites Keras' training step:
forward and backward compute in TVM, the optimizer's updates in TF). First both take the
same 3 steps and their losses are compared (the pass on for the second copy, then off for new
graphs only: `disable(keep_rewritten=True)`); then their steps (`train_on_batch`) are timed
in 5 interleaved rounds and the median of the round medians is kept.
Prints a table: ms per step, the ratio to TF, and the share of the step's compute nodes that
the pass put in TVM.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))


def models() -> dict:
    """name -> build(): (Keras model, its loss, a function of (rng, batch) giving (x, y))."""
    import keras

    L = keras.layers

    def mlp():
        inp = keras.Input((1024,))
        h = inp
        for _ in range(3):
            h = L.Dense(1024, activation="relu")(h)
        return (keras.Model(inp, L.Dense(10)(h)), "mse",
                lambda rng, b: (rng.standard_normal((b, 1024)), rng.standard_normal((b, 10))))  # fmt: skip

    def lstm():
        tokens = keras.Input((40,), dtype="int32")
        h = L.LSTM(128)(L.Embedding(1000, 64)(tokens))
        return (keras.Model(tokens, L.Dense(10)(h)), "mse",
                lambda rng, b: (rng.integers(0, 1000, (b, 40)), rng.standard_normal((b, 10))))  # fmt: skip

    def encoder():
        inp = keras.Input((64, 128))
        h = L.LayerNormalization()(inp + L.MultiHeadAttention(num_heads=4, key_dim=32)(inp, inp))
        out = L.LayerNormalization()(h + L.Dense(128)(L.Dense(512, activation="gelu")(h)))
        return (keras.Model(inp, out), "mse",
                lambda rng, b: (rng.standard_normal((b, 64, 128)), rng.standard_normal((b, 64, 128))))  # fmt: skip

    return {"MLP 1024x3": mlp, "LSTM 128 x 40 steps": lstm, "Transformer block 64x128": encoder}


ROUNDS = 5


def _copy(build):
    import keras

    keras.utils.set_random_seed(0)
    model, loss, data = build()
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss=loss)
    return model, data


def _typed(model, x, y):
    dtype = model.inputs[0].dtype
    return x.astype("int32" if "int" in str(dtype) else "float32"), y.astype("float32")


def measure(name: str, build, batch: int, repeats: int) -> dict:
    import tftvm
    from tftvm import enable_pass

    (in_tf, data), (in_tvm, _) = _copy(build), _copy(build)
    rng = np.random.default_rng(0)
    batches = [_typed(in_tf, *data(rng, batch)) for _ in range(3)]
    before = len(enable_pass.rewrites())
    start = time.perf_counter()
    want = [float(in_tf.train_on_batch(x, y)) for x, y in batches]
    tftvm.enable()
    try:
        got = [float(in_tvm.train_on_batch(x, y)) for x, y in batches]
    finally:  # new graphs (the TF copy's step, instantiated again) run in TF; this one keeps TVM
        tftvm.disable(keep_rewritten=True)
    first_steps = time.perf_counter() - start
    steps = [r for r in enable_pass.rewrites()[before:] if r.compute_nodes]
    x, y = batches[0]
    times = {"TF": [], "enable": []}
    for _ in range(ROUNDS):  # interleaved
        for way, model in (("TF", in_tf), ("enable", in_tvm)):
            for _ in range(3):  # untimed
                model.train_on_batch(x, y)
            samples = []
            for _ in range(max(1, repeats // ROUNDS)):
                t = time.perf_counter()
                model.train_on_batch(x, y)
                samples.append(time.perf_counter() - t)
            times[way].append(1e3 * float(np.median(samples)))
    tf_ms, tvm_ms = float(np.median(times["TF"])), float(np.median(times["enable"]))
    return {"model": name, "batch": batch,
            "loss rel diff": max(abs(g - w) / max(abs(w), 1e-30) for g, w in zip(got, want)),
            "in TVM %": 100 * sum(r.offloaded for r in steps) / max(1, sum(r.compute_nodes for r in steps)),
            "first steps s": first_steps, "TF ms": tf_ms, "enable ms": tvm_ms, "/TF": tvm_ms / tf_ms}  # fmt: skip


COLUMNS = [("model", ""), ("batch", "d"), ("loss rel diff", ".1e"), ("in TVM %", ".1f"), ("first steps s", ".1f"),
           ("TF ms", ".2f"), ("enable ms", ".2f"), ("/TF", ".2f")]  # fmt: skip


def main() -> None:
    from common import machine, markdown_table, print_table

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", help="comma-separated names (default: all)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=60, help=f"timed steps per way, over {ROUNDS} rounds")
    parser.add_argument("--markdown", help="also write the table as Markdown to this file")
    args = parser.parse_args()
    zoo = models()
    names = args.models.split(",") if args.models else list(zoo)
    rows = [measure(name, zoo[name], args.batch, args.repeats) for name in names]
    print(machine())
    print_table(rows, COLUMNS)
    if args.markdown:
        Path(args.markdown).write_text(markdown_table(rows, COLUMNS) + "\n")


if __name__ == "__main__":
    main()
