"""The model zoo: real Keras models through both tftvm paths, checked against TF.

    python benchmarks/zoo.py [--models NAME,NAME] [--size S] [--batch B] [--repeats N]
                             [--tune SECONDS] [--markdown FILE]

One model of every keras.applications family (random weights and batch-norm statistics, the smallest input
each accepts unless --size), Keras RNN and text models (LSTM, GRU, SimpleRNN with
states, Bidirectional, Conv1D), a two-input model, a Transformer encoder block (10x32,
128 tokens x 512 with 8 heads and a 2048-unit MLP, and BERT-base's 128 x 768 with 12 heads
and a 3072-unit MLP), an MLP (3 x 1024 units), and legacy Keras (tf_keras) variants: MobileNetV2,
ResNet50, an LSTM and a GRU.
Each is compiled with a `None` batch by `tftvm.optimize` and `tftvm.compile_model`, and
run as an unchanged script would run it under `tftvm.enable()` (path "enable": a
tf.function of the model, instantiated while the pass is on), at batch 1 and 3 against
the Keras model itself. Per model and path: the
share of compute nodes that run in TVM, the largest error relative to the output's
largest magnitude, the compile time, where a compile_model result runs calls at batch
B once its safety net has timed that shape ("runs in"), and the latency at batch B (default 1) as a
ratio to TF (`tf.function(model)`), to XLA (`jit_compile=True`) and to tftvm's
frozen, constant-folded graph run by TF ("frozen/TF": what freezing alone gains,
which the safety net's TF side runs), all measured in this run (medians of N
interleaved calls). `--tune SECONDS` adds a "compile_model tuned" row: the
compile_model result tuned at batch B for that many seconds (MetaSchedule, a fresh
database), its static program serving the calls. A model that fails is a row with its error.
tests/test_zoo.py runs a few of these models small.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

APPLICATIONS = {  # family representative -> smallest input side it accepts
    "ConvNeXtTiny": 32, "DenseNet121": 32, "EfficientNetB0": 32, "EfficientNetV2B0": 32,
    "InceptionResNetV2": 75, "InceptionV3": 75, "MobileNet": 32, "MobileNetV2": 32,
    "MobileNetV3Small": 32, "NASNetMobile": 32, "ResNet50": 32,
    "ResNet50V2": 32, "VGG16": 32, "Xception": 71,
}  # fmt: skip
VOCAB, SEQ = 50, 12


def _keras(legacy: bool):
    """Keras 3, or legacy Keras (`tf_keras`, Keras 2), which many TF codebases still use."""
    import importlib

    return importlib.import_module("tf_keras" if legacy else "keras")


def application(name: str, size: int, legacy: bool = False):
    def build():
        keras = _keras(legacy)
        keras.utils.set_random_seed(0)
        # Logits, not the softmax: a softmax of random-weight logits is ~uniform and hides errors.
        model = getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3),
                                                   classifier_activation=None)  # fmt: skip
        trained_statistics(model, keras)
        return model, [_spec([None, size, size, 3])], lambda rng, b: [rng.standard_normal((b, size, size, 3)).astype(np.float32)]

    return build


def trained_statistics(model, keras) -> None:
    """Batch norms with statistics as training leaves them, not their initial ones: at mean 0,
    variance 1, scale 1 and offset 0, TF's constant folding removes most of a frozen batch norm,
    which flatters the frozen paths (optimize, compile_model) against enable()'s variables."""
    rng = np.random.default_rng(0)
    for layer in model._flatten_layers():
        if isinstance(layer, keras.layers.BatchNormalization):
            for weight in layer.weights:  # gamma, beta, moving mean, moving variance, as present
                name = weight.name.split("/")[-1].split(":")[0]  # tf_keras: "<layer>/gamma:0"
                low, high = {"gamma": (0.5, 1.5), "moving_variance": (0.5, 2.0)}.get(name, (-0.5, 0.5))
                weight.assign(rng.uniform(low, high, weight.shape).astype(np.float32))


def _spec(shape, dtype="float32"):
    import tensorflow as tf

    return tf.TensorSpec(shape, dtype)


def _text(body, legacy: bool = False):
    """A token-id model: Embedding, then `body`'s layers (given the Keras layers module), then
    a Dense head."""

    def build():
        keras = _keras(legacy)
        keras.utils.set_random_seed(0)
        tokens = keras.Input((SEQ,), dtype="int32")
        outputs = body(keras.layers, keras.layers.Embedding(VOCAB, 16)(tokens))
        return (keras.Model(tokens, outputs), [_spec([None, SEQ], "int32")],
                lambda rng, b: [rng.integers(0, VOCAB, (b, SEQ)).astype(np.int32)])  # fmt: skip

    return build


def _lstm(L, h):
    return L.Dense(4)(L.LSTM(24)(h))


def _gru(L, h):
    return L.Dense(4)(L.GlobalAveragePooling1D()(L.GRU(24, return_sequences=True)(h)))


def _simple_rnn_states(L, h):
    seq, state = L.SimpleRNN(16, return_sequences=True, return_state=True)(h)
    return [L.Dense(4)(state), seq]


def _bidirectional(L, h):
    h = L.Bidirectional(L.LSTM(12, return_sequences=True))(h)
    return L.Dense(4)(L.Bidirectional(L.GRU(8))(h))


def _conv1d(L, h):
    h = L.Conv1D(32, 3, activation="relu", padding="same")(h)
    return L.Dense(4)(L.GlobalMaxPooling1D()(L.Conv1D(16, 3, dilation_rate=2)(h)))


def two_input():
    import keras

    keras.utils.set_random_seed(0)
    L = keras.layers
    image, meta = keras.Input((16, 16, 3)), keras.Input((5,))
    h = L.GlobalAveragePooling2D()(L.Conv2D(8, 3, activation="relu")(image))
    out = L.Dense(3)(L.Concatenate()([h, L.Dense(8, activation="swish")(meta)]))
    model = keras.Model([image, meta], [out, L.Softmax()(out)])
    signature = [[_spec([None, 16, 16, 3]), _spec([None, 5])]]
    return model, signature, lambda rng, b: [[rng.standard_normal((b, 16, 16, 3)).astype(np.float32),
                                              rng.standard_normal((b, 5)).astype(np.float32)]]  # fmt: skip


def transformer(seq: int, width: int, heads: int, hidden: int):
    """A post-norm Transformer encoder block: multi-head self-attention and a GELU MLP."""

    def build():
        import keras

        keras.utils.set_random_seed(0)
        L = keras.layers
        inp = keras.Input((seq, width))
        h = L.LayerNormalization()(inp + L.MultiHeadAttention(num_heads=heads, key_dim=width // heads)(inp, inp))
        out = L.LayerNormalization()(h + L.Dense(width)(L.Dense(hidden, activation="gelu")(h)))
        return (keras.Model(inp, out), [_spec([None, seq, width])],
                lambda rng, b: [rng.standard_normal((b, seq, width)).astype(np.float32)])  # fmt: skip

    return build


def mlp(width: int, depth: int, classes: int = 10):
    """`depth` ReLU Dense layers of `width` units on `width` features, then a softmax head."""

    def build():
        import keras

        keras.utils.set_random_seed(0)
        L = keras.layers
        inp = keras.Input((width,))
        h = inp
        for _ in range(depth):
            h = L.Dense(width, activation="relu")(h)
        model = keras.Model(inp, L.Dense(classes, activation="softmax")(h))
        return model, [_spec([None, width])], lambda rng, b: [rng.standard_normal((b, width)).astype(np.float32)]

    return build


def models(size: int | None = None) -> dict:
    """name -> builder() giving (keras model, input_signature, make_inputs(rng, batch))."""
    zoo = {name: application(name, size or smallest) for name, smallest in APPLICATIONS.items()}
    zoo.update({"LSTM": _text(_lstm), "GRU": _text(_gru), "SimpleRNN+states": _text(_simple_rnn_states),
                "Bidirectional": _text(_bidirectional), "Conv1D text": _text(_conv1d),
                "two-input": two_input, "Transformer block": transformer(10, 32, 4, 64),
                # At the sizes that carry the time in practice (BERT-base-like width halved; a wide MLP):
                "Transformer encoder 128x512": transformer(128, 512, 8, 2048), "MLP 1024x3": mlp(1024, 3),
                "BERT-base encoder": transformer(128, 768, 12, 3072),
                # Legacy Keras (tf_keras): its own graphs (FusedBatchNormV3's unused outputs, its
                # embedding lookup's colocation, its RNN loops).
                "tf_keras MobileNetV2": application("MobileNetV2", size or 32, legacy=True),
                "tf_keras ResNet50": application("ResNet50", size or 32, legacy=True),
                "tf_keras LSTM": _text(_lstm, legacy=True), "tf_keras GRU": _text(_gru, legacy=True)})  # fmt: skip
    return zoo


def compile_with(path: str, model, signature):
    import tftvm

    return getattr(tftvm, path)(model, signature)


class WithPass:
    """The Keras model as an unchanged script runs it under `tftvm.enable()`: a tf.function of
    it, first called (so instantiated, and rewritten by the pass) while the pass is on. The
    pass is then switched off for new graphs only (`disable(keep_rewritten=True)`), so this
    function keeps its TVM graph while the other ways run TF's."""

    def __init__(self, model, signature, inputs):
        import tensorflow as tf
        import tftvm
        from tftvm import enable_pass

        self._fn = tf.function(model, input_signature=list(signature))
        before = len(enable_pass.rewrites())
        tftvm.enable()
        try:
            self._fn(*inputs)
        finally:
            tftvm.disable(keep_rewritten=True)
        self._rewrites = enable_pass.rewrites()[before:]

    def __call__(self, *inputs):
        return self._fn(*inputs)

    def errors(self) -> list[str]:
        """Why the pass left a function of this model in TF, per such function."""
        return [f"{r.function}: {r.error}" for r in self._rewrites if r.error]

    def summary(self):
        from types import SimpleNamespace

        compute = sum(r.compute_nodes for r in self._rewrites)
        return SimpleNamespace(fraction=sum(r.offloaded for r in self._rewrites) / compute if compute else 0.0)


def relative_error(want, got) -> float:
    """The largest deviation over all outputs, relative to each output's largest magnitude."""
    import tensorflow as tf

    worst = 0.0
    for w, g in zip(tf.nest.flatten(want), tf.nest.flatten(got)):
        w, g = np.asarray(w, np.float64), np.asarray(g, np.float64)
        if w.size:
            error = float(np.max(np.abs(w - g)) / max(np.max(np.abs(w)), 1e-30))
            worst = max(worst, error if np.isfinite(error) else np.inf)  # a NaN is no match
    return worst


def check(model, compiled, make_inputs, batches=(1, 3)) -> float:
    """The relative error of `compiled` against `model` over `batches`."""
    rng = np.random.default_rng(0)
    errors = []
    for batch in batches:
        inputs = make_inputs(rng, batch)
        errors.append(relative_error(model(*inputs), compiled(*inputs)))
    return max(errors)


def frozen_in_tf(model, signature):
    """tftvm's frozen graph of `model`, run by TF as a tf.function of the flat inputs."""
    import tensorflow as tf
    from tftvm.graph.tfgraph.freeze import freeze
    from tftvm.graph.tfgraph.functions import graph_runner

    frozen = freeze(model, signature)
    run = graph_runner(frozen.graph_def, [t.name for t in frozen.inputs], [t.name for t in frozen.outputs])
    flat = tf.function(run, input_signature=[tf.TensorSpec(t.shape, t.dtype) for t in frozen.inputs], autograph=False)
    return lambda *inputs: flat(*tf.nest.flatten(list(inputs)))


def tuned(compiled, inputs, seconds: float):
    """`compiled` (a compile_model result) tuned at the shapes of `inputs` for `seconds`."""
    import tempfile

    import tensorflow as tf
    import tftvm

    shapes = [tuple(np.shape(x)) for x in tf.nest.flatten(list(inputs))]
    database = tempfile.mkdtemp(prefix="zoo_tuning_")
    return tftvm.tune(compiled, trials=100_000, time_budget=seconds, database=database, shapes=[shapes], seed=0)


def settled(compiled, inputs) -> str:
    """Where `compiled` runs calls like `inputs` once its safety net has decided: a
    compile_model result times input shapes it has not measured (batch 8) on their first
    calls, TVM and TF in turn; those calls go before the timed ones, as a user's first do."""
    import tensorflow as tf
    import tftvm

    if not isinstance(compiled, tftvm.CompiledModel):
        return ""  # an optimize result: "in TVM %" says what its safety net kept in TF
    if compiled.timing is None:
        return "TVM"
    for _ in range(4 * tftvm.compiled_model.TRIAL_SAMPLES):
        compiled(*inputs)
    verdict = compiled.timings.get(tuple(tuple(np.shape(x)) for x in tf.nest.flatten(list(inputs))))
    return "TF" if verdict is not None and verdict.tf_faster else "TVM"


def measure(name: str, build, repeats: int, batch: int = 1, tune_seconds: float = 0) -> list[dict]:
    import tensorflow as tf
    from common import median_ms

    model, signature, make_inputs = build()
    inputs = make_inputs(np.random.default_rng(1), batch)
    reference = tf.function(model)
    xla = tf.function(model, jit_compile=True)
    rows, runs = [], {}
    paths = ["optimize", "compile_model"] + (["compile_model tuned"] if tune_seconds else []) + ["enable"]
    for path in paths:
        row = {"model": name, "path": path}
        try:
            start = time.perf_counter()
            if path == "compile_model tuned":
                compiled = tuned(runs["compile_model"], inputs, tune_seconds)
                row["tune s"] = time.perf_counter() - start
            elif path == "enable":
                compiled = WithPass(model, signature, inputs)
                row["compile s"] = time.perf_counter() - start
            else:
                compiled = compile_with(path, model, signature)
                row["compile s"] = time.perf_counter() - start
            summary = compiled.summary()
            row["in TVM %"] = 100 * summary.fraction
            row["rel error"] = check(model, compiled, make_inputs, batches=sorted({1, 3, batch}))
            row["runs in"] = settled(compiled, inputs)
            runs[path] = compiled
        except Exception as err:  # a failing model is a row of the table, not the end of the run
            row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:80]}"
        rows.append(row)
    for way, fn in (("XLA", xla), ("frozen", frozen_in_tf(model, signature))):
        try:
            fn(*inputs)
            runs[way] = fn
        except Exception:  # XLA cannot compile every model (e.g. some RNNs): no XLA column then
            pass
    times = {way: [] for way in ["TF", *runs]}
    calls = {"TF": reference, **runs}
    for _ in range(3):  # interleaved rounds, the median of the round medians
        for way in times:
            times[way].append(median_ms(calls[way], *inputs, repeats=max(1, repeats // 3)))
    tf_ms = float(np.median(times["TF"]))
    for row in rows:
        if row["path"] in times:
            row["ms"] = float(np.median(times[row["path"]]))
            row["/TF"] = row["ms"] / tf_ms
        for way in ("XLA", "frozen"):
            if way in times:
                row[f"{way}/TF"] = float(np.median(times[way])) / tf_ms
        row["TF ms"] = tf_ms
    return rows


COLUMNS = [("model", ""), ("path", ""), ("in TVM %", ".1f"), ("rel error", ".1e"), ("compile s", ".1f"),
           ("tune s", ".0f"), ("runs in", ""), ("TF ms", ".2f"), ("ms", ".2f"), ("/TF", ".2f"), ("frozen/TF", ".2f"),
           ("XLA/TF", ".2f"), ("error", "")]  # fmt: skip


def main() -> None:
    from common import machine, markdown_table, print_table

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", help="comma-separated names (default: all)")
    parser.add_argument("--size", type=int, help="input side for the keras.applications models")
    parser.add_argument("--batch", type=int, default=1, help="batch of the timed calls (default 1)")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--tune", type=float, default=0, metavar="SECONDS",
                        help="also tune each compile_model result for SECONDS at the timed batch")
    parser.add_argument("--markdown", help="also write the table as Markdown to this file")
    args = parser.parse_args()
    zoo = models(args.size)
    names = args.models.split(",") if args.models else list(zoo)
    print(machine(), f"batch {args.batch} latency, None batch, {args.repeats} calls per median", flush=True)
    rows = []
    for name in names:
        new = measure(name, zoo[name], args.repeats, args.batch, args.tune)
        rows += new
        print_table(new, COLUMNS)
    print()
    print_table(rows, COLUMNS)
    if args.markdown:
        Path(args.markdown).write_text(markdown_table(rows, COLUMNS) + "\n")


if __name__ == "__main__":
    main()
