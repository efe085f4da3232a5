"""tftvm against its peers on CPU: TF, XLA, TF running tftvm's frozen graph, and OpenVINO.

    python benchmarks/peers.py [--models A,B] [--size S] [--batch 1,8] [--repeats N]
                               [--precision bf16] [--markdown FILE] [--chart FILE]

Models (default all): ResNet50, MobileNetV2, EfficientNetB0, DenseNet121 and InceptionV3
from keras.applications (random weights, trained-like batch-norm statistics, --size x --size
inputs, default 224), the Transformer encoder block 128 tokens x 512 and a BERT-base
encoder block (128 x 768, 12 heads, 3072-unit MLP), all built by benchmarks/zoo.py with a
`None` batch. Each model runs in a fresh child process of its own, so that no way inherits
another model's threads, caches or memory, and a crash costs one model, not the run.

Ways, each built once per model and called on the same inputs: "TF"
(`tf.function(model)`), "XLA" (`jit_compile=True`), "TF frozen" (tftvm's frozen,
constant-folded graph run by TF), "tftvm optimize", "tftvm compile_model" (default CPU
schedules, no tuning), with `--precision bf16` also both tftvm paths with
`precision="bf16"` (and, on a CPU with both AMX and AVX512-BF16, "tftvm compile_model bf16
avx512": the target told the CPU has no AMX, so the products run on the kernels that Zen 4
and Cooper Lake get, its safety net off so that the row times those kernels), and
"OpenVINO f32" /
"OpenVINO bf16": the Keras 3 SavedModel export (`model.export`) through
`openvino.convert_model`, compiled for "CPU" with PERFORMANCE_HINT LATENCY and
INFERENCE_PRECISION_HINT f32 or bf16, its batch left dynamic as exported (as tftvm's).
OpenVINO is called through one infer request made at build time: inputs set as ov.Tensors
sharing the numpy arrays' memory, `infer()`, outputs copied out of its output tensors -- the
lowest-overhead call measured: about 50 us under `compiled(inputs)` (MobileNetV2 at 96x96),
which also reuses one request and shares its inputs but goes through OpenVINO's Python
input dispatch and builds an OVDict of its results. Inputs and outputs are taken by
position (one each for the models here).
A way that fails to build or run is an error cell, not the end of the run.

Per model, way and batch (each of --batch, default 1): the relative error of the outputs
against TF's (the largest deviation relative to the output's largest magnitude); for the
image classifiers, whether every row's top-1 class matches TF's; for the tftvm paths, the
share of compute nodes in TVM (after their safety nets' timing) and where a compile_model
result runs calls at that batch once its safety net has timed TVM against TF on its first
calls ("runs in"; those calls go before the timed ones, as in zoo.py); and the latency: 3
interleaved rounds, each the median of N//3 calls per way (after 3 warm-up calls), then the
median of the round medians (--repeats N, default 30), with its ratio to TF's. The first
line printed is the machine and its CPU's vector and matrix flags; then a table per model
and batch; at the end a summary (model x batch: TF ms and every way's ratio to TF), which
`--markdown FILE` writes as Markdown and `--chart FILE` draws as a PNG
(common.chart: every way's ratio to TF per model and batch; needs matplotlib, in the
`bench` extra). The numbers go to benchmarks/RESULTS.md, with their
date, machine and command.
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import zoo  # noqa: E402

MODELS = ["ResNet50", "MobileNetV2", "EfficientNetB0", "DenseNet121", "InceptionV3",
          "Transformer encoder 128x512", "BERT-base encoder"]  # fmt: skip
COLUMNS = [("way", ""), ("batch", ""), ("ms", ".2f"), ("/TF", ".2f"), ("rel error", ".1e"),
           ("top-1 same", ""), ("in TVM %", ".1f"), ("runs in", ""), ("error", "")]  # fmt: skip


def ways(precision: str | None) -> tuple[list[str], list[str]]:
    """The ways to run, and one line for each group of ways skipped and why."""
    names = ["TF", "XLA", "TF frozen", "tftvm optimize", "tftvm compile_model"]
    notes = []
    if precision == "bf16":
        names += ["tftvm optimize bf16", "tftvm compile_model bf16"]
        if amx_and_avx512_bf16():
            names += ["tftvm compile_model bf16 avx512"]
    if importlib.util.find_spec("openvino") is not None:
        names += ["OpenVINO f32", "OpenVINO bf16"]
    else:
        notes.append("OpenVINO rows skipped: openvino is not importable (pip install openvino)")
    return names, notes


def amx_and_avx512_bf16() -> bool:
    from tftvm.cpu import features

    return features.amx_bf16(None) and features.avx512_bf16(None)


def without_amx() -> dict:
    """This CPU's target with AMX masked off: bf16 products go to the AVX512-BF16 kernels."""
    from tvm.target import codegen

    return {"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu(), "mattr": ["-amx-tile", "-amx-bf16", "-amx-int8"]}


@functools.lru_cache(maxsize=1)
def openvino_model(model):
    """`model` as OpenVINO reads it: its Keras 3 SavedModel export, converted (once per model)."""
    import openvino as ov

    with tempfile.TemporaryDirectory(prefix="peers_export_") as saved:
        model.export(saved, verbose=False)
        return ov.convert_model(saved)  # the converted model holds the weights: the folder can go


class OpenVINO:
    """An OpenVINO CPU compile of `model` at `precision` ("f32", "bf16"), called like the Keras
    model on numpy inputs and returning numpy: one infer request, reused; inputs shared, not
    copied; outputs copied out, since the request overwrites its output tensors on each call."""

    def __init__(self, model, precision: str):
        import openvino as ov

        self._tensor = ov.Tensor
        config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": precision}
        self.compiled = ov.Core().compile_model(openvino_model(model), "CPU", config)
        self._request = self.compiled.create_infer_request()
        self._outputs = range(len(self.compiled.outputs))

    def __call__(self, *inputs):
        import tensorflow as tf

        for i, x in enumerate(tf.nest.flatten(list(inputs))):
            self._request.set_input_tensor(i, self._tensor(np.ascontiguousarray(x), shared_memory=True))
        self._request.infer()
        out = [self._request.get_output_tensor(i).data.copy() for i in self._outputs]
        return out[0] if len(out) == 1 else out


def build(way: str, model, signature):
    """The callable that runs `model` the way `way` names."""
    import tensorflow as tf
    import tftvm

    if way == "TF":
        return tf.function(model)
    if way == "XLA":
        return tf.function(model, jit_compile=True)
    if way == "TF frozen":
        return zoo.frozen_in_tf(model, signature)
    if way.startswith("OpenVINO "):
        return OpenVINO(model, way.split()[1])
    path, *options = way.split()[1:]  # "tftvm optimize", "tftvm compile_model bf16 [avx512]"
    kwargs = {"precision": options[0]} if options else {}
    kwargs.update({"target": without_amx(), "keep_faster": False} if options[1:] == ["avx512"] else {})
    return getattr(tftvm, path)(model, signature, **kwargs)


def error(err: Exception) -> str:
    return f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:80]}"


def top1_same(want, got) -> str:
    """"yes" when every row's argmax matches TF's, else how many of the rows do."""
    import tensorflow as tf

    w, g = (np.argmax(np.asarray(tf.nest.flatten(o)[0]), axis=-1) for o in (want, got))
    same = int(np.sum(w == g))
    return "yes" if same == w.size else f"{same}/{w.size}"


def measure_batch(name: str, calls: dict, make_inputs, batch: int, repeats: int) -> list[dict]:
    """One row per way at `batch`: error and top-1 against TF, in TVM %, interleaved latency."""
    from common import median_ms

    inputs = make_inputs(np.random.default_rng(1), batch)
    want = calls["TF"](*inputs)  # TF failing fails the model: there is nothing to compare with
    rows, live = {}, {}
    for way, fn in calls.items():
        row = rows[way] = {"way": way, "batch": batch}
        if isinstance(fn, str):  # the error it failed to build with
            row["error"] = fn
            continue
        try:
            got = fn(*inputs)
            row["rel error"] = zoo.relative_error(want, got)
            if name in zoo.APPLICATIONS:
                row["top-1 same"] = top1_same(want, got)
            if way.startswith("tftvm"):
                row["in TVM %"] = 100 * fn.summary().fraction
                row["runs in"] = zoo.settled(fn, inputs)  # compile_model's trial calls go before the timed ones
            live[way] = fn
        except Exception as err:
            row["error"] = error(err)
    times = {way: [] for way in live}
    for _ in range(3):  # interleaved rounds, the median of the round medians
        for way in list(times):
            try:
                times[way].append(median_ms(live[way], *inputs, repeats=max(1, repeats // 3)))
            except Exception as err:
                rows[way]["error"] = error(err)
                del times[way]
    tf_ms = float(np.median(times["TF"]))
    for way, samples in times.items():
        rows[way]["ms"] = float(np.median(samples))
        rows[way]["/TF"] = rows[way]["ms"] / tf_ms
    return list(rows.values())


def measure(name: str, size: int, batches: list[int], repeats: int, precision: str | None) -> list[dict]:
    """All ways of model `name`, its table per batch printed; returns its summary rows."""
    from common import print_table

    model, signature, make_inputs = zoo.models(size)[name]()
    calls = {}
    for way in ways(precision)[0]:
        try:
            calls[way] = build(way, model, signature)
        except Exception as err:  # a way that fails is a row with its error, not the end of the run
            calls[way] = error(err)
    summary = []
    for batch in batches:
        rows = measure_batch(name, calls, make_inputs, batch, repeats)
        print(f"\n{name}, batch {batch}", flush=True)
        print_table(rows, COLUMNS)
        summary.append({"model": name, "batch": batch, "TF ms": rows[0]["ms"],
                        **{f"{r['way']}/TF": r.get("/TF", "error") for r in rows[1:]}})  # fmt: skip
    return summary


def in_child(name: str, args) -> list[dict]:
    """Model `name` measured by a fresh process of its own; its tables go to stdout."""
    with tempfile.TemporaryDirectory(prefix="peers_") as tmp:
        result = Path(tmp) / "summary.json"
        flags = ["--size", str(args.size), "--batch", args.batch, "--repeats", str(args.repeats)]
        flags += ["--precision", args.precision] if args.precision else []
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
        proc = subprocess.run([sys.executable, __file__, *flags, "--child", name, "--result", str(result)],
                              stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
        if proc.returncode == 0 and result.exists():
            return json.loads(result.read_text())
    lines = proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"]
    print(f"\n{name}: the child process failed (exit status {proc.returncode}): {lines[-1]}", flush=True)
    return [{"model": name, "error": f"child process: {lines[-1][:80]}"}]


def summary_columns(names: list[str], rows: list[dict]) -> list[tuple[str, str]]:
    """TF ms, then every way's ratio to it; an error column only where a model failed outright."""
    errors = [("error", "")] if any("error" in row for row in rows) else []
    return [("model", ""), ("batch", ""), ("TF ms", ".2f"), *((f"{w}/TF", ".2f") for w in names[1:]), *errors]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", help=f"comma-separated names (default: {','.join(MODELS)})")
    parser.add_argument("--size", type=int, default=224, help="input side of the image models (default 224)")
    parser.add_argument("--batch", default="1", help="comma-separated batches of the timed calls (default 1)")
    parser.add_argument("--repeats", type=int, default=30, help="calls per way, over 3 interleaved rounds")
    parser.add_argument("--precision", choices=["bf16"], help="also the tftvm paths with precision=bf16")
    parser.add_argument("--markdown", help="also write the summary as Markdown to this file")
    parser.add_argument("--chart", help="also draw the summary's ratios to TF as a PNG to this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    batches = [int(b) for b in args.batch.split(",")]
    if args.child:
        summary = measure(args.child, args.size, batches, args.repeats, args.precision)
        Path(args.result).write_text(json.dumps(summary))
        return
    from common import CPU_FLAGS, cpu_flags, machine, markdown_table, print_table

    names = args.models.split(",") if args.models else MODELS
    unknown = sorted(set(names) - set(zoo.models(args.size)))
    if unknown:
        parser.error(f"unknown models {unknown}; zoo.py has {sorted(zoo.models(args.size))}")
    print(f"{machine()}; CPU flags: {' '.join(cpu_flags()) or 'none of ' + ' '.join(CPU_FLAGS)}")
    print(f"size {args.size}, batch {args.batch}, None-batch compiles; ms: median of 3 interleaved rounds of "
          f"{max(1, args.repeats // 3)} calls per way", flush=True)  # fmt: skip
    way_names, notes = ways(args.precision)
    for note in notes:
        print(note, flush=True)
    summary = []
    for name in names:
        summary += in_child(name, args)
    columns = summary_columns(way_names, summary)
    print("\nSummary: TF ms and each way's ratio to TF (< 1: faster than TF)")
    print_table(summary, columns)
    if args.markdown:
        Path(args.markdown).write_text(markdown_table(summary, columns) + "\n")
    if args.chart:
        from common import chart

        chart(chart_bars(summary, way_names[1:]), Path(args.chart), title=f"tftvm and its peers on {machine()}")


def chart_bars(summary: list[dict], ways: list[str]) -> list[tuple[str, str, float]]:
    """(model and batch, way, ratio to TF) for every way that ran, in the summary's order."""
    return [(f"{row['model']} b{row['batch']}", way, row[f"{way}/TF"]) for row in summary for way in ways
            if isinstance(row.get(f"{way}/TF"), (int, float))]  # fmt: skip


if __name__ == "__main__":
    main()
