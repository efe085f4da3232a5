"""TVM's kernels and TF's with a busy neighbour: another process spinning on one core.

Per model (keras.applications with random weights; 224x224, batch 1 by default), one process
times, interleaved, with the safety net off so that TVM runs everything it compiled:
  TF                    the Keras model in a tf.function
  optimize, TF pool     tftvm.optimize, its kernels' parallel loops on TF's intra-op pool (the default)
  optimize, TVM pool    the same graph, its loops on TVM's own pool (tftvm.native.use_tf_threads(False))
  compile_model         the whole model on TVM's VM, its loops on tftvm's launcher (the default)
  compile_model, TVM pool   the same VM, its loops on TVM's own pool
first on a quiet machine, then while a second process spins on core 0. The table gives each
way's milliseconds, its ratio to TF in the same condition, and its busy/quiet slowdown.

    python benchmarks/contention.py [--models ResNet50,MobileNetV2] [--size 224] [--batch 1]
"""
from __future__ import annotations

import argparse
import subprocess
import sys

import numpy as np

import zoo
from common import cpu_flags, machine, markdown_table, median_ms, print_table

SPINNER = "import os\nos.sched_setaffinity(0, {0})\nwhile True:\n    pass\n"
ROUNDS = 5


def ways(model, signature) -> dict:
    import tensorflow as tf
    import tftvm
    from tftvm import native

    def on_pool(run, tf_pool: bool):
        def call(x):
            native.use_tf_threads(tf_pool)
            return run(x)

        return call

    optimized = tftvm.optimize(model, signature, keep_faster=False)
    compiled = tftvm.compile_model(model, signature, keep_faster=False)
    return {"TF": tf.function(model), "optimize, TF pool": on_pool(optimized, True),
            "optimize, TVM pool": on_pool(optimized, False), "compile_model": on_pool(compiled, True),
            "compile_model, TVM pool": on_pool(compiled, False)}  # fmt: skip


def timed(calls: dict, x, repeats: int) -> dict:
    """way -> median ms over ROUNDS interleaved rounds (each the median of `repeats` calls)."""
    samples = {way: [] for way in calls}
    for _ in range(ROUNDS):
        for way, call in calls.items():
            samples[way].append(median_ms(call, x, repeats=repeats))
    return {way: float(np.median(s)) for way, s in samples.items()}


def measure(name: str, size: int, batch: int, repeats: int) -> list[dict]:
    model, signature, make_inputs = zoo.models(size)[name]()
    calls = ways(model, signature)
    x = make_inputs(np.random.default_rng(0), batch)[0]
    want = calls["TF"](x).numpy()
    for way, call in calls.items():
        error = zoo.relative_error(want, call(x))
        assert error < 1e-4, f"{name} {way}: relative error {error:.1e} against TF"
    quiet = timed(calls, x, repeats)
    spinner = subprocess.Popen([sys.executable, "-c", SPINNER])
    try:
        busy = timed(calls, x, repeats)
    finally:
        spinner.kill()
        spinner.wait()
    return [{"model": name, "way": way, "quiet ms": quiet[way], "busy ms": busy[way],
             "quiet /TF": quiet[way] / quiet["TF"], "busy /TF": busy[way] / busy["TF"],
             "busy/quiet": busy[way] / quiet[way]} for way in calls]  # fmt: skip


COLUMNS = [("model", ""), ("way", ""), ("quiet ms", ".2f"), ("busy ms", ".2f"), ("quiet /TF", ".2f"),
           ("busy /TF", ".2f"), ("busy/quiet", ".2f")]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="ResNet50,MobileNetV2", help="comma-separated keras.applications names")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=10, help="calls per way in each interleaved round")
    parser.add_argument("--markdown", help="also write the table as Markdown to this file")
    args = parser.parse_args()
    print(f"{machine()}; CPU flags: {' '.join(cpu_flags())}")
    print(f"size {args.size}, batch {args.batch}; busy: another process spinning on core 0; ms: median of "
          f"{ROUNDS} interleaved rounds of {args.repeats} calls", flush=True)  # fmt: skip
    rows = []
    for name in args.models.split(","):
        rows += measure(name, args.size, args.batch, args.repeats)
    print_table(rows, COLUMNS)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown_table(rows, COLUMNS) + "\n")


if __name__ == "__main__":
    main()
