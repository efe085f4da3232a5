"""Real Keras models through both paths with a `None` batch, against Keras itself.

A few models of benchmarks/zoo.py, small: an application CNN with Keras' swish
(IdentityN) and depthwise convs, RNN text models, a two-input model with two outputs,
a Transformer block. `python benchmarks/zoo.py` runs every family.
"""
import sys

import numpy as np
import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import zoo  # noqa: E402

MODELS = zoo.models()
CASES = ["MobileNetV2", "EfficientNetB0", "LSTM", "Bidirectional", "SimpleRNN+states", "two-input",
         "Transformer block", "tf_keras MobileNetV2", "tf_keras LSTM"]  # fmt: skip
# Share of compute nodes in TVM that each model keeps. The RNNs' loops, TensorList ops and
# loop counters stay in TF; their cells' matmuls and gates run in TVM.
MIN_IN_TVM = {"MobileNetV2": 0.95, "EfficientNetB0": 0.95, "Transformer block": 0.95, "two-input": 0.95,
              "LSTM": 0.6, "Bidirectional": 0.6, "SimpleRNN+states": 0.45, "tf_keras MobileNetV2": 0.95,
              "tf_keras LSTM": 0.6}  # fmt: skip


@pytest.fixture(scope="module")
def built():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = MODELS[name]()
        return cache[name]

    return get


@pytest.mark.parametrize("path", ["optimize", "compile_model"])
@pytest.mark.parametrize("name", CASES)
def test_model_matches_keras_with_most_compute_in_tvm(built, name, path):
    model, signature, make_inputs = built(name)
    compiled = zoo.compile_with(path, model, signature)
    assert zoo.check(model, compiled, make_inputs, batches=(1, 3)) <= 1e-4
    if name in MIN_IN_TVM:
        summary = compiled.summary()
        assert summary.failed_clusters == [] and summary.fraction >= MIN_IN_TVM[name], compiled.report()


# Through tftvm.enable()'s pass (variables stay variables, read inside the loop bodies).
MIN_IN_TVM_ENABLED = {"MobileNetV2": 0.95, "Transformer block": 0.9, "two-input": 0.95, "LSTM": 0.6,
                      "tf_keras MobileNetV2": 0.95, "tf_keras LSTM": 0.7}  # fmt: skip


@pytest.mark.parametrize("name", sorted(MIN_IN_TVM_ENABLED))
def test_model_under_enable_matches_keras_with_most_compute_in_tvm(built, name):
    import tftvm

    model, signature, make_inputs = built(name)
    with_pass = zoo.WithPass(model, signature, make_inputs(np.random.default_rng(1), 2))
    assert not tftvm.is_enabled()
    assert zoo.check(model, with_pass, make_inputs, batches=(1, 3)) <= 1e-4
    assert with_pass.errors() == []  # tf_keras' embedding lookup once failed its import (colocation)
    assert with_pass.summary().fraction >= MIN_IN_TVM_ENABLED[name], tftvm.enabled_report()
