"""keras_hub's decoder and encoder backbones (tiny configs, random weights, a None batch)
through optimize, compile_model and enable(): all of their compute in TVM, right against
Keras' own output. Llama's grouped-query attention repeats keys and values with a Reshape to
a computed shape and its rotary embedding slices with new axes; Gemma masks with All;
Mixtral routes each token to its top-k experts."""
import numpy as np
import pytest
import tensorflow as tf

import tftvm
from tftvm import enable_pass

keras_hub = pytest.importorskip("keras_hub")

SEQ = 16
BACKBONES = {
    "llama": lambda: keras_hub.models.LlamaBackbone(vocabulary_size=100, num_layers=2, num_query_heads=4,
                                                    num_key_value_heads=2, hidden_dim=64, intermediate_dim=128),
    "gemma": lambda: keras_hub.models.GemmaBackbone(vocabulary_size=100, num_layers=1, num_query_heads=4,
                                                    num_key_value_heads=1, hidden_dim=64, intermediate_dim=128,
                                                    head_dim=16),
    "gpt2": lambda: keras_hub.models.GPT2Backbone(vocabulary_size=100, num_layers=2, num_heads=4, hidden_dim=64,
                                                  intermediate_dim=128, max_sequence_length=SEQ),
    # A mixture of experts: a router's top-k picks 2 of 4 feed-forward experts per token.
    "mixtral": lambda: keras_hub.models.MixtralBackbone(vocabulary_size=100, num_layers=1, num_query_heads=4,
                                                        num_key_value_heads=2, hidden_dim=64, intermediate_dim=128,
                                                        num_experts=4, top_k=2, sliding_window=8),
}  # fmt: skip


def inputs(batch, rng):
    return {"token_ids": rng.integers(0, 100, (batch, SEQ)).astype(np.int32),
            "padding_mask": np.concatenate([np.ones((batch, SEQ - 3), np.int32), np.zeros((batch, 3), np.int32)], 1)}


def relative_error(got, want) -> float:
    return float(np.max(np.abs(np.asarray(got) - want)) / np.max(np.abs(want)))


@pytest.mark.parametrize("name", sorted(BACKBONES))
def test_backbone_runs_wholly_in_tvm_on_every_path(name, rng):
    import keras

    keras.utils.set_random_seed(0)
    backbone = BACKBONES[name]()
    signature = [{"token_ids": tf.TensorSpec([None, SEQ], tf.int32), "padding_mask": tf.TensorSpec([None, SEQ], tf.int32)}]
    feeds = [inputs(2, rng), inputs(3, rng)]
    wants = [backbone(x).numpy() for x in feeds]
    for path in ("optimize", "compile_model"):
        compiled = getattr(tftvm, path)(backbone, signature, keep_faster=False)
        assert compiled.summary().fraction >= 0.95, compiled.report()
        for x, want in zip(feeds, wants):
            assert relative_error(compiled(x), want) <= 1e-5, path
    predict = tf.function(backbone, input_signature=signature)
    before = len(enable_pass.rewrites())
    with tftvm.enabled(keep_faster=False):
        got = [predict(x) for x in feeds]
        report = tftvm.enabled_report()
    rewrites = enable_pass.rewrites()[before:]
    compute = sum(r.compute_nodes for r in rewrites)
    assert compute and sum(r.offloaded for r in rewrites) >= 0.95 * compute, report
    for g, want in zip(got, wants):
        assert relative_error(g, want) <= 1e-5


CAUSAL_LMS = {
    "gpt2": lambda: keras_hub.models.GPT2CausalLM(preprocessor=None, backbone=keras_hub.models.GPT2Backbone(
        vocabulary_size=100, num_layers=1, num_heads=2, hidden_dim=32, intermediate_dim=64, max_sequence_length=32)),
    # Grouped-query attention: 4 query heads share 2 key/value heads (a repeat of the cache).
    "llama": lambda: keras_hub.models.LlamaCausalLM(preprocessor=None, backbone=keras_hub.models.LlamaBackbone(
        vocabulary_size=100, num_layers=2, num_query_heads=4, num_key_value_heads=2, hidden_dim=32,
        intermediate_dim=64)),
}  # fmt: skip


@pytest.mark.parametrize("jit_compile", [False, "replace", "inside"])
@pytest.mark.parametrize("name", sorted(CAUSAL_LMS))
def test_greedy_generate_under_enable_gives_keras_tokens(name, jit_compile, rng):
    """A decoder's generate() (a While loop whose body updates the KV cache with
    XlaDynamicUpdateSlice) under enable(), the user's code unchanged: the same greedy tokens,
    and the decode step's compute in TVM. With compile(jit_compile=True) XLA compiles
    generate(); enable()'s jit_compile mode says what becomes of it."""
    import keras

    keras.utils.set_random_seed(0)
    lm = CAUSAL_LMS[name]()
    prompt = {"token_ids": np.concatenate([rng.integers(1, 100, (2, 5)), np.zeros((2, 11), np.int64)], 1).astype(np.int32),
              "padding_mask": np.arange(16)[None, :].repeat(2, 0) < 5}  # fmt: skip

    def generate():
        lm.compile(sampler="greedy", jit_compile=bool(jit_compile))  # a new generate function
        return lm.generate(prompt, stop_token_ids=None)["token_ids"]

    want = generate()
    before = len(enable_pass.rewrites())
    with tftvm.enabled(keep_faster=False, jit_compile=jit_compile or "replace"):
        got = generate()
        report = tftvm.enabled_report()
    np.testing.assert_array_equal(got, want)
    rewrites = enable_pass.rewrites()[before:]
    assert "XlaDynamicUpdateSlice" in report and "stayed in TF: XlaDynamicUpdateSlice" not in report, report
    assert sum(r.offloaded for r in rewrites) >= 0.9 * sum(r.compute_nodes for r in rewrites), report


def test_compile_model_of_generate_gives_keras_tokens(rng):
    """compile_model of a decoder's generate function: its While stays a TF node (its frozen
    loop body, rewritten by constant folding since the freeze registered it, is imported under
    a name of its own), the rest runs in TVM, and greedy decoding gives Keras' tokens."""
    import keras

    keras.utils.set_random_seed(0)
    lm = CAUSAL_LMS["gpt2"]()
    lm.compile(sampler="greedy")
    prompt = {"token_ids": np.concatenate([rng.integers(1, 100, (2, 5)), np.zeros((2, 11), np.int64)], 1).astype(np.int32),
              "padding_mask": np.arange(16)[None, :].repeat(2, 0) < 5}  # fmt: skip
    want = lm.generate(prompt, stop_token_ids=None)["token_ids"]
    generate = lm.generate_function
    signature = [{"token_ids": tf.TensorSpec((2, 16), tf.int32), "padding_mask": tf.TensorSpec((2, 16), tf.bool)}]
    compiled = tftvm.compile_model(tf.function(lambda x: generate(x, None)), signature, keep_faster=False)
    np.testing.assert_array_equal(compiled(prompt)["token_ids"], want)
    assert compiled.summary().fraction >= 0.85, compiled.report()
