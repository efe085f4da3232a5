"""`tftvm demo`: what tftvm is for, shown on this machine in a minute or two.

Two cases, each checked against TF and timed in the same process (interleaved medians):
a TVM kernel as a TF op (one fused bias + GELU kernel where eager TF dispatches eight ops),
and a Keras CNN through `tftvm.optimize`, timed against the Keras model in a `tf.function`
and against TF's own frozen graph of it, so the table says how much of the speed is TVM's
kernels and how much is freezing. Progress goes to the `progress` callback.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np
import tensorflow as tf

CNN_INPUT = (1, 96, 96, 3)  # batch 1, MobileNetV2 (alpha 0.35) at 96x96: compiles in under a minute


@dataclasses.dataclass
class Row:
    what: str
    baseline: str  # what tftvm is compared with
    baseline_ms: float
    tftvm_ms: float


@dataclasses.dataclass
class Outcome:
    rows: list  # Row per comparison
    max_rel_error: float  # tftvm against TF, over both cases
    offloaded: str  # the optimize report's first line: the share of compute in TVM


def build_bias_gelu():
    """A fused bias-add + tanh-GELU epilogue as one TVM kernel (TF runs it as 8 ops)."""
    from tvm import te, tirx

    from .op import op

    n, units = te.var("n"), 256
    x = te.placeholder((n, units), "float32", name="x")
    b = te.placeholder((units,), "float32", name="b")

    def gelu(i, j):
        v = x[i, j] + b[j]
        return 0.5 * v * (1.0 + tirx.tanh(0.7978845608 * (v + 0.044715 * v * v * v)))

    return op([x, b], [te.compute((n, units), gelu, name="y")], name="bias_gelu")


def interleaved_ms(calls: list, rounds: int = 30, per_round: int = 5) -> list[float]:
    """Median ms per call of each of `calls`, timed in turn so that a busy moment of the
    machine lands on all of them."""
    for call in calls:
        call()
    samples = [[] for _ in calls]
    for _ in range(rounds):
        for call, times in zip(calls, samples):
            start = time.perf_counter()
            for _ in range(per_round):
                call()
            times.append((time.perf_counter() - start) / per_round)
    return [1e3 * float(np.median(times)) for times in samples]


def _rel_error(got, want) -> float:
    """The largest deviation relative to the output's largest magnitude (as benchmarks/zoo.py)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))


def run(progress=lambda message: None) -> Outcome:
    """Both cases; raises AssertionError if tftvm's results differ from TF's."""
    import keras

    from .graph.optimize import optimize
    from .graph.tfgraph.freeze import freeze
    from .graph.tfgraph.functions import graph_runner

    rng = np.random.default_rng(0)
    progress("compiling a fused bias+GELU TVM kernel")
    bias_gelu = build_bias_gelu()
    h = tf.constant(rng.standard_normal((64, 256), dtype=np.float32))
    b = tf.constant(rng.standard_normal(256, dtype=np.float32))
    errors = [_rel_error(bias_gelu(h, b), tf.nn.gelu(h + b, approximate=True))]
    op_ms = interleaved_ms([lambda: tf.nn.gelu(h + b, approximate=True), lambda: bias_gelu(h, b)], rounds=50)

    progress(f"building MobileNetV2 (alpha 0.35, random weights) at {CNN_INPUT[1]}x{CNN_INPUT[2]}, batch 1")
    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV2(input_shape=CNN_INPUT[1:], alpha=0.35, weights=None)
    signature = [tf.TensorSpec((None, *CNN_INPUT[1:]))]
    progress("tftvm.optimize: freezing, clustering, compiling each cluster with TVM, timing it against TF")
    fast = optimize(model, signature)
    frozen = freeze(model, signature)
    run_frozen = tf.function(graph_runner(frozen.graph_def, [t.name for t in frozen.inputs],
                                          [t.name for t in frozen.outputs]))  # fmt: skip
    keras_call = tf.function(model)
    x = tf.constant(rng.standard_normal(CNN_INPUT, dtype=np.float32))
    want = keras_call(x).numpy()
    errors += [_rel_error(fast(x), want), _rel_error(run_frozen(x)[0], want)]
    progress("timing")
    keras_ms, frozen_ms, fast_ms = interleaved_ms([lambda: keras_call(x), lambda: run_frozen(x), lambda: fast(x)])
    assert max(errors) < 1e-4, f"tftvm's results differ from TF's: max rel error {max(errors):.3g}"
    return Outcome([
        Row("bias+GELU 64x256, eager", "TF's 8 ops", op_ms[0], op_ms[1]),
        Row("MobileNetV2 96x96, batch 1", "Keras, tf.function", keras_ms, fast_ms),
        Row("MobileNetV2 96x96, batch 1", "TF's frozen graph", frozen_ms, fast_ms),
    ], max(errors), fast.report().splitlines()[0])  # fmt: skip
