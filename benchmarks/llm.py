"""Text generation: keras_hub decoders' greedy generate(), TF against XLA and tftvm.enable().

    python benchmarks/llm.py [--models gpt2,llama] [--batch 1,8] [--prompt 32] [--new 64]
                             [--repeats 3] [--jit-compile replace|inside] [--precision bf16] [--markdown FILE]

Models (random weights; `preprocessor=None`, so generate() takes token ids and a padding mask):
  gpt2   GPT-2 small's shape: 12 layers, hidden 768, 12 heads, MLP 3072, 50257 tokens (124M)
  llama  a Llama of about 100M: 12 layers, hidden 768, 12 query and 4 key/value heads,
         MLP 2048, 32000 tokens
Each model and batch runs in a child process of its own. Ways, each a CausalLM over the same
backbone compiled with sampler="greedy", called on the same prompt (--prompt random token
ids, then --new tokens to generate; stop tokens off, so every call makes them all):
  TF       Keras' default compile (its "auto" jit_compile is False on CPU)
  XLA      compile(jit_compile=True)
  enable   the default compile, its first call under `tftvm.enable()` (the user's code
           unchanged; the pass then switched off for new graphs only, so the other ways
           run TF's)
  XLA+enable  compile(jit_compile=True), its first call under the same `tftvm.enable()`, whose
           `jit_compile` option is --jit-compile: "replace" (TVM's clusters and TF's executor
           instead of XLA, the default) or "inside" (TVM's clusters as custom calls in XLA's program)
  compile_model  `tftvm.compile_model` of the CausalLM's generate step (the prompt's pass and
           the decoding While loop, one VM program calling the loop's TF node, whose body runs
           as tftvm ops) for the batch and length, safety net on as a user has it: its first
           calls decide by turns whether the VM or the frozen graph in TF runs the rest (the
           prompt's pass; the loop body is TVM's in both) ("in TF", and their median times
           "VM/frozen TF"); called with the same prompt, in a second child
           process beside TF of its own (its compiling would share the first one's memory
           with three more models)
  enable bf16  with --precision bf16: the same, `tftvm.enable(precision="bf16")` (weights and
           activations of the products in bf16: half the bytes a decode step reads), in a
           second child process beside TF of its own (enable() with other options has TF
           instantiate every function again, so the f32 way would run TF's graph after it)
The first call of each way (tracing, compiling) is timed alone; then --repeats interleaved
rounds, one call per way each. Tokens/s is batch x new tokens over the median call. Every f32
way must give TF's tokens (greedy decoding), else its row says it does not; bf16 rounds the
logits, so with random weights (logits close together) its tokens may differ.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

MODELS = ["gpt2", "llama"]
WAYS = ["TF", "XLA", "enable", "XLA+enable"]


def causal_lm(name: str, backbone):
    import keras_hub

    if name == "gpt2":
        return keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    return keras_hub.models.LlamaCausalLM(backbone=backbone, preprocessor=None)


def backbone(name: str, length: int):
    import keras_hub

    if name == "gpt2":
        return keras_hub.models.GPT2Backbone(vocabulary_size=50257, num_layers=12, num_heads=12, hidden_dim=768,
                                             intermediate_dim=3072, max_sequence_length=length)  # fmt: skip
    return keras_hub.models.LlamaBackbone(vocabulary_size=32000, num_layers=12, num_query_heads=12,
                                          num_key_value_heads=4, hidden_dim=768, intermediate_dim=2048)  # fmt: skip


def ways(name: str, length: int, names: list[str]) -> dict:
    """way -> a CausalLM compiled for it (one backbone, shared)."""
    import keras

    keras.utils.set_random_seed(0)
    shared = backbone(name, length)
    lms = {}
    for way in names:  # compile_model's is a Keras CausalLM until measure compiles its step
        lm = causal_lm(name, shared)
        lm.compile(sampler="greedy", jit_compile=way.startswith("XLA"))
        lms[way] = lm
    return lms


def generated(lm, prompt) -> np.ndarray:
    if isinstance(lm, CompiledStep):
        return lm(prompt)
    return np.asarray(lm.generate(prompt, stop_token_ids=None)["token_ids"])


class CompiledStep:
    """A CausalLM's generate step through tftvm.compile_model, for one batch and length."""

    def __init__(self, lm, batch: int, length: int):
        import tensorflow as tf
        import tftvm

        step = tf.function(lambda ids, mask: lm.generate_step({"token_ids": ids, "padding_mask": mask}, None))
        specs = [tf.TensorSpec([batch, length], tf.int32), tf.TensorSpec([batch, length], tf.bool)]
        self.model = tftvm.compile_model(step, specs)

    def __call__(self, prompt) -> np.ndarray:
        return np.asarray(self.model(prompt["token_ids"], prompt["padding_mask"])["token_ids"])

    def settle(self, prompt):
        """Call until the safety net has its verdict at the prompt's shapes (TF raises on
        random token ids and masks, so the first calls decide, by turns): its Timing of the
        VM against the frozen graph in TF."""
        from tftvm.compiled_model import TRIAL_SAMPLES

        for _ in range(4 * TRIAL_SAMPLES):  # pairs of calls, TRIAL_SAMPLES pairs a side
            if self.model.timings:
                break
            self(prompt)
        return next(iter(self.model.timings.values()), None)


def measure(name: str, batch: int, prompt_len: int, new: int, repeats: int, names: list[str],
            jit_compile: str) -> dict:
    import tftvm
    from tftvm import enable_pass

    length = prompt_len + new
    vocabulary = 50257 if name == "gpt2" else 32000
    rng = np.random.default_rng(0)
    prompt = {"token_ids": np.concatenate([rng.integers(1, vocabulary, (batch, prompt_len)),
                                           np.zeros((batch, new), np.int64)], 1).astype(np.int32),
              "padding_mask": np.arange(length)[None, :].repeat(batch, 0) < prompt_len}  # fmt: skip
    lms = ways(name, length, names)
    first, tokens, rewrites, verdicts = {}, {}, {}, {}
    for way, lm in lms.items():  # the ways without tftvm first: enable() makes TF instantiate again
        if "enable" not in way:
            start = time.perf_counter()
            if way == "compile_model":  # its first call includes compiling, as the others' do
                lms[way] = lm = CompiledStep(lm, batch, length)
            tokens[way] = generated(lm, prompt)
            first[way] = time.perf_counter() - start
            if way == "compile_model":
                verdicts[way] = lm.settle(prompt)
    enabled = [way for way in lms if "enable" in way]
    if enabled:  # every tftvm way's first call under one enable(), so none is instantiated again
        precision = enabled[0].split()[1] if " " in enabled[0] else "f32"
        tftvm.enable(precision=precision, jit_compile=jit_compile)
        try:
            for way in enabled:
                before = len(enable_pass.rewrites())
                start = time.perf_counter()
                tokens[way] = generated(lms[way], prompt)
                first[way] = time.perf_counter() - start
                rewrites[way] = enable_pass.rewrites()[before:]
        finally:
            tftvm.disable(keep_rewritten=True)
    samples = {way: [] for way in lms}
    for _ in range(repeats):
        for way, lm in lms.items():
            start = time.perf_counter()
            generated(lm, prompt)
            samples[way].append(time.perf_counter() - start)
    row = {"model": name, "batch": batch}
    tf_s = float(np.median(samples["TF"]))
    for way in lms:
        s = float(np.median(samples[way]))
        row[f"{way} tok/s"] = batch * new / s
        row[f"{way}/TF"] = s / tf_s
        row[f"{way} first s"] = first[way]
        row[f"{way} same tokens"] = bool(np.array_equal(tokens[way], tokens["TF"]))
    if "XLA+enable" in lms:
        row["XLA+enable/XLA"] = row["XLA+enable/TF"] / row["XLA/TF"]
    for way, verdict in verdicts.items():  # which ran: the VM or, where faster, the frozen graph in TF
        row[f"{way} in TF"] = None if verdict is None else verdict.tf_faster
        row[f"{way} VM/frozen TF"] = None if verdict is None else verdict.tvm_seconds / verdict.tf_seconds
    if "compile_model" in lms:
        row["compile_model in TVM %"] = 100.0 * lms["compile_model"].model.summary().fraction
    for way, done in rewrites.items():
        compute = sum(r.compute_nodes for r in done)
        row[f"{way} in TVM %"] = 100.0 * sum(r.offloaded for r in done) / compute if compute else 0.0
    return row


def in_child(name: str, batch: int, args) -> dict:
    """The row of `name` at `batch`: TF, XLA and enable in one child process, compile_model
    in a second one against its own TF; with --precision, enable at that precision in a
    third one, against its own TF."""
    row = {}
    groups = [WAYS, ["TF", "compile_model"]] + ([["TF", f"enable {args.precision}"]] if args.precision else [])
    for names in groups:
        with tempfile.TemporaryDirectory() as tmp:
            result = Path(tmp) / "row.json"
            cmd = [sys.executable, __file__, "--child", name, "--ways", ",".join(names), "--batch", str(batch),
                   "--prompt", str(args.prompt), "--new", str(args.new), "--repeats", str(args.repeats),
                   "--jit-compile", args.jit_compile, "--result", str(result)]  # fmt: skip
            proc = subprocess.run(cmd, env=dict(os.environ, KERAS_BACKEND="tensorflow"))
            if proc.returncode != 0 or not result.exists():
                return {"model": name, "batch": batch, "error": f"child exited with {proc.returncode}"}
            part = json.loads(result.read_text())
        row.update({k: v for k, v in part.items() if not row or not k.startswith("TF ")})
    if "compile_model/TF" in row and "XLA/TF" in row:  # each against TF in its own process
        row["compile_model/XLA"] = row["compile_model/TF"] / row["XLA/TF"]
    return row


def columns(precision: str | None) -> list[tuple[str, str]]:
    extra = [f"enable {precision}"] if precision else []
    ways = ["XLA", "enable", "XLA+enable", "compile_model", *extra]
    return [("model", ""), ("batch", "d"), ("TF tok/s", ".1f"), *[(f"{w}/TF", ".2f") for w in ways],
            ("XLA+enable/XLA", ".2f"), ("compile_model/XLA", ".2f"), *[(f"{w} tok/s", ".1f") for w in ways],
            *[(f"{w} in TVM %", ".1f") for w in ["enable", "XLA+enable", "compile_model", *extra]],
            ("compile_model in TF", ""), ("compile_model VM/frozen TF", ".2f"),
            ("TF first s", ".1f"), *[(f"{w} first s", ".1f") for w in ways],
            *[(f"{w} same tokens", "") for w in ways], ("error", "")]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {MODELS}")
    parser.add_argument("--batch", default="1,8", help="comma-separated batches")
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens")
    parser.add_argument("--new", type=int, default=64, help="tokens to generate")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per way, interleaved")
    parser.add_argument("--jit-compile", default="replace", choices=["inside", "replace"],
                        help="enable()'s jit_compile option, for the XLA+enable way")
    parser.add_argument("--precision", choices=["bf16"], help="also enable() with this precision")
    parser.add_argument("--markdown", help="also write the table as Markdown to this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--ways", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        row = measure(args.child, int(args.batch), args.prompt, args.new, args.repeats, args.ways.split(","),
                      args.jit_compile)
        Path(args.result).write_text(json.dumps(row))
        return
    from common import CPU_FLAGS, cpu_flags, machine, markdown_table, print_table

    names = args.models.split(",")
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        parser.error(f"unknown models {unknown}; this benchmark has {MODELS}")
    print(f"{machine()}; CPU flags: {' '.join(cpu_flags()) or 'none of ' + ' '.join(CPU_FLAGS)}")
    print(f"prompt {args.prompt} tokens, {args.new} new, greedy; median of {args.repeats} interleaved calls per way",
          flush=True)  # fmt: skip
    rows = [in_child(name, int(batch), args) for name in names for batch in args.batch.split(",")]
    print_table(rows, columns(args.precision))
    if args.markdown:
        Path(args.markdown).write_text(markdown_table(rows, columns(args.precision)) + "\n")


if __name__ == "__main__":
    main()
