"""Peak memory and latency: TF, `tftvm.optimize`, and `tftvm.compile_model` (the Relax VM).

    python benchmarks/compile_model.py [--repeats N]

For the small CNN and the Transformer encoder block of benchmarks/optimize.py, each
way of running the model is measured in a fresh child process of its own, so that
peak RSS belongs to it alone: "peak MiB" is the process's peak RSS after the runs,
"model MiB" its growth over a baseline process. Two settings: in-process (build the
Keras model, then TF / optimize / compile_model it and run; the baseline builds the
model and runs nothing), and serving (load what another process saved: a TF
SavedModel, or a `compile_model` export via `tftvm.load_model`; the baseline imports
TF and tftvm only). Latency: median of N calls (default 50) after 3 warm-up calls,
symbolic batch, default CPU schedules (no tuning).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
WAYS = ["baseline", "TF", "tftvm.optimize", "tftvm.compile_model"]
# Serving: a fresh process loads what another one saved (no Keras model built, no compiler run).
SERVING = ["serving baseline", "TF SavedModel", "tftvm.load_model"]
MODELS = {"small CNN (b8)": "small_cnn", "Transformer block (b8)": "transformer_block"}


def prepare(model_name: str, out: str) -> None:
    """Save the model both ways, with an input and its expected output."""
    import keras
    import numpy as np
    import tensorflow as tf
    import tftvm

    import optimize

    keras.utils.set_random_seed(0)
    model, batch = getattr(optimize, MODELS[model_name])()
    shape = tuple(model.inputs[0].shape[1:])
    x = np.random.default_rng(0).standard_normal((batch, *shape)).astype(np.float32)
    np.save(f"{out}/x.npy", x)
    np.save(f"{out}/y.npy", np.asarray(model(x)))
    signature = [tf.TensorSpec([None, *shape], tf.float32)]
    module = tf.Module()
    module.model = model  # tracks the variables
    module.serve = tf.function(model, input_signature=signature)
    tf.saved_model.save(module, f"{out}/saved_model")
    tftvm.compile_model(model, signature).export(f"{out}/tftvm_model")


def serve(way: str, out: str, repeats: int) -> dict:
    import resource

    import numpy as np
    import psutil
    import tensorflow as tf
    import tftvm

    from common import median_ms

    x = tf.constant(np.load(f"{out}/x.npy"))
    run = loaded = None
    if way == "TF SavedModel":
        loaded = tf.saved_model.load(f"{out}/saved_model")  # keeps the variables alive
        run = loaded.serve
    elif way == "tftvm.load_model":
        run = tftvm.load_model(f"{out}/tftvm_model")
    ms = median_ms(run, x, repeats=repeats) if run else None
    if run is not None:
        np.testing.assert_allclose(np.asarray(run(x)), np.load(f"{out}/y.npy"), rtol=1e-3, atol=1e-3)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {"ms": ms, "peak_mib": peak, "rss_mib": psutil.Process().memory_info().rss / 2**20}


def child(model_name: str, way: str, repeats: int) -> dict:
    import resource

    import keras
    import numpy as np
    import psutil
    import tensorflow as tf
    import tftvm

    import optimize
    from common import median_ms

    keras.utils.set_random_seed(0)
    model, batch = getattr(optimize, MODELS[model_name])()
    shape = tuple(model.inputs[0].shape[1:])
    signature = [tf.TensorSpec([None, *shape], tf.float32)]
    x = tf.constant(np.random.default_rng(0).standard_normal((batch, *shape)).astype(np.float32))
    run = None
    if way == "TF":
        run = tf.function(model, input_signature=signature)
    elif way == "tftvm.optimize":
        run = tftvm.optimize(model, input_signature=signature)
    elif way == "tftvm.compile_model":
        run = tftvm.compile_model(model, signature)
    ms = median_ms(run, x, repeats=repeats) if run else None
    if run is not None:
        np.testing.assert_allclose(np.asarray(run(x)), np.asarray(model(x)), rtol=1e-3, atol=1e-3)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {"ms": ms, "peak_mib": peak, "rss_mib": psutil.Process().memory_info().rss / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--prepare", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(*args.child, args.repeats)))
        return
    if args.serve:
        print("RESULT " + json.dumps(serve(*args.serve, args.repeats)))
        return
    if args.prepare:
        prepare(*args.prepare)
        return
    from common import machine, print_table

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TFTVM_CACHE_DIR=tempfile.mkdtemp(prefix="tftvm-bench-"))
    def run(*flags) -> dict:
        proc = subprocess.run([sys.executable, __file__, *flags, "--repeats", str(args.repeats)],
                              capture_output=True, text=True, env=env, cwd=HERE)  # fmt: skip
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode != 0 or (flags[0] != "--prepare" and not line):
            raise RuntimeError(f"{flags} failed:\n{proc.stderr[-3000:]}")
        return json.loads(line[0][7:]) if line else {}

    rows = []
    for model in MODELS:
        saved = tempfile.mkdtemp(prefix="tftvm-bench-saved-")
        run("--prepare", model, saved)
        in_process = {way: run("--child", model, way) for way in WAYS}
        serving = {way: run("--serve", way, saved) for way in SERVING}
        for results in (in_process, serving):
            ways = list(results)
            base, tf_ms = results[ways[0]]["peak_mib"], results[ways[1]]["ms"]
            for way in ways[1:]:
                r = results[way]
                rows.append({"model": model, "way": way, "ms": r["ms"], "ratio to TF": r["ms"] / tf_ms,
                             "peak MiB": r["peak_mib"], "model MiB": r["peak_mib"] - base})  # fmt: skip
    print(machine())
    print_table(rows, [("model", ""), ("way", ""), ("ms", ".3f"), ("ratio to TF", ".2f"),
                       ("peak MiB", ".0f"), ("model MiB", ".0f")])  # fmt: skip


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    main()
