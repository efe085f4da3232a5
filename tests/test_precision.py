"""precision="bf16": matmuls and convs in bf16 with f32 accumulation, on AMX tiles or else on
AVX512-BF16's VDPBF16PS, checked against TF in f32 on every path; on a CPU without the units
(or a target without them) they stay f32 and match TF as closely as ever."""
import re

import keras
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf
import tftvm
from tftvm import enable_pass
from tftvm.cpu import amx, avx512_bf16, features, vnni_layout
from tftvm.cpu.post_ops import PostOps
from tftvm.graph.lowering.precision import PrecisionReport
from tvm.target import codegen

from conftest import run_python

AMX = features.amx_bf16(None)
needs_amx = pytest.mark.skipif(not AMX, reason="this CPU has no AMX-BF16 tiles")
AVX512_BF16 = features.avx512_bf16(None)
needs_avx512_bf16 = pytest.mark.skipif(not AVX512_BF16, reason="this CPU has no AVX512-BF16")
UNITS = [pytest.param(amx, marks=needs_amx, id="amx"),
         pytest.param(avx512_bf16, marks=needs_avx512_bf16, id="avx512_bf16")]  # fmt: skip
NO_BF16_UNITS = {"kind": "llvm", "mcpu": "znver3"}  # AVX2 only: runs on any x86-64 CPU these tests meet
# this CPU as one without AMX (Zen 4, Cooper Lake): where it has AVX512-BF16, bf16 runs on that
WITHOUT_AMX = {"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu(), "mattr": ["-amx-tile", "-amx-bf16", "-amx-int8"]}
BF16_RTOL = 2e-2  # the bound for bf16 products against f32


def _bf16(x):
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16)


def _relative(want, got) -> float:
    want, got = np.asarray(want, np.float64), np.asarray(got, np.float64)
    return float(np.max(np.abs(want - got)) / np.max(np.abs(want)))


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize("rows", [1, 13, 15, 16, 17, 32, 33, 70])
def test_the_matmul_kernels_are_f32_accumulated_products_of_bf16_inputs_at_any_row_count(rng, unit, rows):
    k, n = 96, 64
    a = _bf16(rng.standard_normal((rows, k)))
    b = _bf16(rng.standard_normal((k, n)))
    packed = b.reshape(k // 2, 2, n // 16, 16).transpose(2, 0, 3, 1).copy()
    assert packed.shape == vnni_layout.packed_shape(k, n)
    kernel = tftvm.op(unit.matmul_bf16(k, n))  # one kernel for every row count: m is symbolic
    got = kernel(tf.constant(a), tf.constant(packed)).numpy()
    want = a.astype(np.float64) @ b.astype(np.float64)  # exact products of the bf16 values
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize("case", [(9, 9, 64, 64, 3, 1, 1), (8, 8, 32, 96, 3, 2, 1), (7, 7, 64, 32, 1, 2, 1),
                                  (10, 6, 32, 64, 3, 1, 2), (7, 7, 32, 32, 3, 1, 1), (9, 38, 32, 32, 3, 1, 1)],
                         ids=["3x3", "3x3-stride2", "1x1-stride2", "3x3-dilated", "7x7-image",
                              "rows-of-16-then-4-pixels"])  # fmt: skip
def test_the_conv_kernels_match_tf_on_bf16_inputs(rng, unit, case):
    height, width, c, o, window, stride, dilation = case
    x = _bf16(rng.standard_normal((2, height, width, c)))
    w = _bf16(rng.standard_normal((window, window, c, o)))
    packed = w.reshape(window, window, c // 2, 2, o // 16, 16).transpose(4, 0, 1, 2, 5, 3).copy()
    assert packed.shape == vnni_layout.conv_packed_shape(window, window, c, o)
    kernel = tftvm.op(unit.conv2d_bf16(height, width, c, o, (window, window), (stride, stride), (dilation, dilation)))
    got = kernel(tf.constant(x), tf.constant(packed)).numpy()
    want = tf.nn.conv2d(x.astype(np.float32), w.astype(np.float32), stride, "VALID", dilations=dilation).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize("post", [PostOps(), PostOps(residual=True, activation="relu"), PostOps(activation="relu6")],
                         ids=lambda p: p.name())  # fmt: skip
def test_post_ops_are_applied_as_the_kernels_write_their_results(rng, unit, post):
    k, n, rows = 64, 64, 37
    a, b = _bf16(rng.standard_normal((rows, k))), _bf16(rng.standard_normal((k, n)))
    bias, residual = rng.standard_normal(n).astype(np.float32), 4 * rng.standard_normal((rows, n)).astype(np.float32)
    packed = b.reshape(k // 2, 2, n // 16, 16).transpose(2, 0, 3, 1).copy()
    want = a.astype(np.float64) @ b.astype(np.float64) + bias + (residual if post.residual else 0)
    want = {None: want, "relu": np.maximum(want, 0), "relu6": np.clip(want, 0, 6)}[post.activation]
    inputs = [tf.constant(a), tf.constant(packed), tf.constant(bias)] + ([tf.constant(residual)] if post.residual else [])
    got = tftvm.op(unit.matmul_bf16(k, n, post))(*inputs).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    # the conv kernel: the same post-ops on [1, rows, 1, n] as a 1x1 conv's output
    conv = tftvm.op(unit.conv2d_bf16(rows, 1, k, n, (1, 1), (1, 1), (1, 1), post))
    images = [tf.reshape(inputs[0], [1, rows, 1, k]), tf.constant(packed[:, None, None]), inputs[2]]
    images += [tf.reshape(inputs[3], [1, rows, 1, n])] if post.residual else []
    got = conv(*images).numpy().reshape(rows, n)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def _dense_and_conv_model():
    """Dense layers on a sequence (k = 64, 96: AMX's multiples of 32; n = 10 padded to a
    column block); convs: 3x3 stride 2 on 3 channels (k = 3: stays f32), 1x1 (k = 32: a
    matmul over pixels), 3x3 SAME with a residual add and ReLU (k = 64), 3x3 with n = 8 (padded;
    an odd image side). Biases are random: a zero bias add is folded away when the graph is
    frozen. Post-ops: the first Dense's bias, the 1x1's bias and ReLU, the residual conv's
    bias, residual and ReLU; the padded products keep theirs."""
    keras.utils.set_random_seed(0)
    layers = keras.layers
    tokens, image = keras.Input((12, 64)), keras.Input((9, 9, 3))
    h = layers.Dense(96, activation="gelu", bias_initializer="normal")(tokens)
    text = layers.Dense(10, bias_initializer="normal")(h)
    c = layers.Conv2D(32, 3, strides=2, padding="same", activation="relu")(image)
    c = layers.Conv2D(64, 1, activation="relu", bias_initializer="normal")(c)
    c = layers.ReLU()(layers.Conv2D(64, 3, padding="same", bias_initializer="normal")(c) + c)
    c = layers.Conv2D(8, 3, padding="same", bias_initializer="normal")(c)
    signature = [[tf.TensorSpec([None, 12, 64]), tf.TensorSpec([None, 9, 9, 3])]]
    return keras.Model([tokens, image], [text, c]), signature


def _inputs(rng, batch=3):
    return [[rng.standard_normal((batch, 12, 64)).astype(np.float32),
             rng.standard_normal((batch, 9, 9, 3)).astype(np.float32)]]  # fmt: skip


def _check_bf16(want, got, report: PrecisionReport, units: str = "AMX-BF16" if AMX else "", counts=(5, 6, 3)):
    errors = [_relative(w, g) for w, g in zip(want, got)]
    if units:
        assert report.units == units and (report.in_bf16, report.products, report.post_ops) == counts, report.text()
        assert max(errors) <= BF16_RTOL
        assert min(errors) > 1e-5, "every output went through a bf16 product: its rounding shows"
    else:
        assert report.units == "" and report.in_bf16 == 0, report.text()
        assert max(errors) <= 1e-5


@pytest.mark.parametrize("path", ["compile_model", "optimize"])
def test_bf16_products_match_tf_in_f32_within_the_bf16_bound(rng, path):
    model, signature = _dense_and_conv_model()
    inputs = _inputs(rng)
    want = [t.numpy() for t in model(*inputs)]
    compiled = getattr(tftvm, path)(model, signature, precision="bf16", keep_faster=False)
    got = [np.asarray(t) for t in compiled(*inputs)]
    _check_bf16(want, got, compiled.precision)
    assert ("precision: bf16" in compiled.report()) == AMX


def test_enable_takes_the_precision_option(rng):
    model, signature = _dense_and_conv_model()
    inputs = _inputs(rng)
    want = [t.numpy() for t in model(*inputs)]
    fn = tf.function(model, input_signature=signature)
    before = len(enable_pass.rewrites())
    with tftvm.enabled(keep_faster=False, precision="bf16"):
        got = [t.numpy() for t in fn(*inputs)]
    (rewrite,) = enable_pass.rewrites()[before:]
    errors = [_relative(w, g) for w, g in zip(want, got)]
    assert max(errors) <= (BF16_RTOL if AMX else 1e-5)
    counts = [tuple(map(int, m)) for m in re.findall(r"bf16 on AMX-BF16: (\d+) of (\d+) matmuls/convs, (\d+)",
                                                     rewrite.report)]  # fmt: skip
    assert tuple(map(sum, zip(*counts))) == ((5, 6, 3) if AMX else ()), rewrite.report


@pytest.mark.parametrize("target, units", [
    pytest.param(WITHOUT_AMX, "AVX512-BF16", marks=needs_avx512_bf16, id="avx512_bf16-without-amx"),
    pytest.param(NO_BF16_UNITS, "", id="no-bf16-units")])  # fmt: skip
def test_a_target_without_amx_runs_the_products_on_the_unit_it_has_and_says_so(rng, target, units):
    """AVX512-BF16 takes the 3-channel conv too (padded to 4 channels: AMX's 32 would be ten
    times the work)."""
    model, signature = _dense_and_conv_model()
    inputs = _inputs(rng)
    want = [t.numpy() for t in model(*inputs)]
    compiled = tftvm.compile_model(model, signature, precision="bf16", target=target, keep_faster=False)
    got = [np.asarray(t) for t in compiled(*inputs)]
    _check_bf16(want, got, compiled.precision, units=units, counts=(6, 6, 3))
    assert ("bf16 on AVX512-BF16: 6 of 6" if units else "no bf16 instructions") in compiled.report()


def _padded_channels_model():
    """Products whose k is no multiple of AMX's 32: a Dense layer of k = 40 (run at 64), a 3x3
    SAME conv of 24 input channels (its image and channel padding one pad), a 1x1 conv of 48
    (n = 10: its columns padded too), and a 3x3 conv of k = 10 (AMX: 32 would be over twice the
    multiplies, so it stays f32; AVX512-BF16 runs it)."""
    keras.utils.set_random_seed(0)
    layers = keras.layers
    tokens, image = keras.Input((12, 40)), keras.Input((8, 8, 24))
    text = layers.Dense(32, bias_initializer="normal")(tokens)
    c = layers.Conv2D(48, 3, padding="same", activation="relu", bias_initializer="normal")(image)
    c = layers.Conv2D(10, 1, bias_initializer="normal")(c)
    c = layers.Conv2D(32, 3, bias_initializer="normal")(c)
    signature = [[tf.TensorSpec([None, 12, 40]), tf.TensorSpec([None, 8, 8, 24])]]
    return keras.Model([tokens, image], [text, c]), signature


@pytest.mark.skipif(not (AMX or AVX512_BF16), reason="this CPU has no bf16 instructions tftvm uses")
def test_a_reduction_short_of_whole_steps_runs_padded_with_zeros(rng):
    model, signature = _padded_channels_model()
    inputs = [[rng.standard_normal((2, 12, 40)).astype(np.float32),
               rng.standard_normal((2, 8, 8, 24)).astype(np.float32)]]  # fmt: skip
    want = [t.numpy() for t in model(*inputs)]
    compiled = tftvm.compile_model(model, signature, precision="bf16", keep_faster=False)
    got = [np.asarray(t) for t in compiled(*inputs)]
    report = compiled.precision
    assert (report.in_bf16, report.products) == ((3, 4) if AMX else (4, 4)), report.text()
    assert ("k = 10, under half of AMX-BF16's step of 32" in report.text()) == AMX
    errors = [_relative(w, g) for w, g in zip(want, got)]
    assert max(errors) <= BF16_RTOL and min(errors) > 1e-5, errors


@pytest.mark.parametrize("entry", [tftvm.optimize, tftvm.compile_model, tftvm.enable])
def test_an_unknown_precision_is_refused_naming_the_argument(entry):
    model, signature = _dense_and_conv_model()
    args = () if entry is tftvm.enable else (model, signature)
    with pytest.raises(ValueError, match="precision must be one of"):
        entry(*args, precision="fp8")


FRESH_PROCESS = """
import numpy as np, tensorflow as tf
import tftvm
m = tf.saved_model.load({path!r})
x = np.load({x!r})
np.save({out!r}, m.f(tf.constant(x)).numpy())
"""


def test_a_saved_bf16_model_runs_in_a_fresh_process(rng, tmp_path):
    """The process that loads AMX kernels asks Linux for the tiles itself (import tftvm): a tile
    instruction in a process that has not asked is a SIGILL."""
    keras.utils.set_random_seed(0)
    inp = keras.Input((64,))
    model = keras.Model(inp, keras.layers.Dense(32)(keras.layers.Dense(64, activation="relu")(inp)))
    optimized = tftvm.optimize(model, [tf.TensorSpec([None, 64])], precision="bf16", keep_faster=False)
    module = tf.Module()
    module.f = tf.function(lambda x: optimized(x), input_signature=[tf.TensorSpec([None, 64])])
    tf.saved_model.save(module, str(tmp_path / "sm"))
    x = rng.standard_normal((5, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    proc = run_python(FRESH_PROCESS.format(path=str(tmp_path / "sm"), x=str(tmp_path / "x.npy"),
                                           out=str(tmp_path / "y.npy")))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.load(tmp_path / "y.npy")
    assert _relative(model(x).numpy(), got) <= (BF16_RTOL if AMX else 1e-5)
    assert optimized.precision.in_bf16 == (2 if AMX else 0)
