"""Every keras_hub decoder backbone through optimize, compile_model and enable(): in TVM and right?

    python benchmarks/decoders.py [--models bloom,falcon,...] [--markdown FILE]

Tiny configs (2 layers, hidden 64, 4 query / 2 key-value heads, 100 tokens; MoE: 4 experts,
top 2), random weights, a None batch and 16 tokens, the last 3 padded; called at batch 2.
Per family and path: the share of compute nodes in TVM and the largest difference from
Keras' own output relative to its largest value; keep_faster off, so the share is what
converts. Coverage, not speed: llm.py times generation (GPT-2, Llama), zoo.py the encoders.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

VOCABULARY, SEQ = 100, 16
PATHS = ["optimize", "compile_model", "enable"]


def backbones() -> dict:
    """family -> a function building its tiny backbone."""
    import keras_hub

    m = keras_hub.models
    gqa = dict(vocabulary_size=VOCABULARY, num_layers=2, num_query_heads=4, num_key_value_heads=2, hidden_dim=64,
               intermediate_dim=128)  # fmt: skip
    plain = dict(vocabulary_size=VOCABULARY, num_layers=2, hidden_dim=64, intermediate_dim=128)
    return {
        "bloom": lambda: m.BloomBackbone(**plain, num_heads=4),
        "falcon": lambda: m.FalconBackbone(**plain, num_attention_heads=4),
        "gemma": lambda: m.GemmaBackbone(**gqa, head_dim=16),
        "gemma3": lambda: m.Gemma3Backbone(**gqa, head_dim=16, image_size=None, vision_encoder=None),
        "gpt2": lambda: m.GPT2Backbone(**plain, num_heads=4, max_sequence_length=SEQ),
        "gptneox": lambda: m.GPTNeoXBackbone(**plain, num_heads=4, max_sequence_length=SEQ),
        "gptoss": lambda: m.GptOssBackbone(**gqa, num_experts=4, top_k=2, head_dim=16),
        "llama": lambda: m.LlamaBackbone(**gqa),
        "llama3": lambda: m.Llama3Backbone(**gqa),
        "mistral": lambda: m.MistralBackbone(**gqa, sliding_window=8),
        "mixtral": lambda: m.MixtralBackbone(**gqa, num_experts=4, top_k=2),
        "opt": lambda: m.OPTBackbone(**plain, num_heads=4, max_sequence_length=SEQ),
        "phi3": lambda: m.Phi3Backbone(**gqa),
        "qwen": lambda: m.QwenBackbone(**gqa),
        "qwen3": lambda: m.Qwen3Backbone(**gqa, head_dim=16),
        "qwen3moe": lambda: m.Qwen3MoeBackbone(**gqa, moe_intermediate_dim=32, num_experts=4, head_dim=16, top_k=2),
        "qwenmoe": lambda: m.QwenMoeBackbone(**gqa, moe_intermediate_dim=32, shared_expert_intermediate_dim=64,
                                             num_experts=4, top_k=2),  # fmt: skip
        "smollm3": lambda: m.SmolLM3Backbone(
            vocabulary_size=VOCABULARY, hidden_dim=64, intermediate_dim=128, num_layers=2, num_attention_heads=4,
            num_key_value_heads=2, attention_bias=False, attention_dropout=0.0, rope_layer_enabled_list=[True, False],
            layer_types=["attention", "attention"], mlp_bias=False, layer_norm_epsilon=1e-6,
            max_position_embeddings=64, rope_theta=10000.0, partial_rotary_factor=1.0),
    }  # fmt: skip


def relative_error(got, want) -> float:
    return float(np.max(np.abs(np.asarray(got) - np.asarray(want))) / np.max(np.abs(np.asarray(want))))


def row(name: str, build) -> dict:
    import keras
    import tensorflow as tf
    import tftvm
    from tftvm import enable_pass

    keras.utils.set_random_seed(0)
    model = build()
    rng = np.random.default_rng(0)
    x = {"token_ids": rng.integers(0, VOCABULARY, (2, SEQ)).astype(np.int32),
         "padding_mask": np.concatenate([np.ones((2, SEQ - 3), np.int32), np.zeros((2, 3), np.int32)], 1)}  # fmt: skip
    signature = [{key: tf.TensorSpec([None, SEQ], tf.int32) for key in x}]
    want = model(x)
    out = {"family": name}
    for path in ("optimize", "compile_model"):
        compiled = getattr(tftvm, path)(model, signature, keep_faster=False)
        out[f"{path} in TVM %"] = 100.0 * compiled.summary().fraction
        out[f"{path} rel error"] = relative_error(compiled(x), want)
    predict = tf.function(model, input_signature=signature)
    before = len(enable_pass.rewrites())
    with tftvm.enabled(keep_faster=False):
        got = predict(x)
    rewrites = enable_pass.rewrites()[before:]
    compute = sum(r.compute_nodes for r in rewrites)
    out["enable in TVM %"] = 100.0 * sum(r.offloaded for r in rewrites) / compute if compute else 0.0
    out["enable rel error"] = relative_error(got, want)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", help="comma-separated families (default: all)")
    parser.add_argument("--markdown", help="also write the table as Markdown to this file")
    args = parser.parse_args()
    from common import machine, markdown_table, print_table

    families = backbones()
    names = args.models.split(",") if args.models else sorted(families)
    unknown = sorted(set(names) - set(families))
    if unknown:
        parser.error(f"unknown families {unknown}; this benchmark has {sorted(families)}")
    print(machine(), flush=True)
    rows = []
    for name in names:
        try:
            rows.append(row(name, families[name]))
        except Exception as err:  # a family that fails is a row saying how, not the end of the run
            rows.append({"family": name, "error": f"{type(err).__name__}: {str(err)[:200]}"})
        print(f"{name} done", flush=True)
    columns = [("family", "")] + [(f"{p} {c}", f) for p in PATHS for c, f in (("in TVM %", ".1f"), ("rel error", ".1e"))]
    columns.append(("error", ""))
    print_table(rows, columns)
    if args.markdown:
        Path(args.markdown).write_text(markdown_table(rows, columns) + "\n")


if __name__ == "__main__":
    main()
