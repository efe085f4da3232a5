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
import tvm
from tftvm import enable_pass
from tftvm.cpu import amx, avx512_bf16, features, vnni_layout
from tftvm.cpu.post_ops import PostOps
from tftvm.graph.lowering import precision
from tftvm.graph.lowering.precision import PrecisionReport
from tftvm.kernel import resolve_target
from tvm import relax
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
HOST_UNIT = "AMX-BF16" if AMX else "AVX512-BF16" if AVX512_BF16 else ""  # what the host's products run on
# (bf16 products, products, post-ops) of _dense_and_conv_model: AMX leaves the 3-channel conv in f32
HOST_COUNTS = (5, 6, 5) if AMX else (6, 6, 6)


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
@pytest.mark.parametrize("post", [PostOps(), PostOps(residual=True, activation="relu"), PostOps(activation="relu6"),
                                  PostOps(activation="swish"), PostOps(activation="relu", out_dtype="bfloat16")],
                         ids=lambda p: p.name())  # fmt: skip
def test_post_ops_are_applied_as_the_kernels_write_their_results(rng, unit, post):
    k, n, rows = 64, 64, 37
    a, b = _bf16(rng.standard_normal((rows, k))), _bf16(rng.standard_normal((k, n)))
    bias, residual = rng.standard_normal(n).astype(np.float32), 4 * rng.standard_normal((rows, n)).astype(np.float32)
    packed = b.reshape(k // 2, 2, n // 16, 16).transpose(2, 0, 3, 1).copy()
    want = a.astype(np.float64) @ b.astype(np.float64) + bias + (residual if post.residual else 0)
    want = {None: want, "relu": np.maximum(want, 0), "relu6": np.clip(want, 0, 6),
            "swish": want / (1 + np.exp(-want))}[post.activation]  # fmt: skip
    inputs = [tf.constant(a), tf.constant(packed), tf.constant(bias)] + ([tf.constant(residual)] if post.residual else [])
    rtol = 1e-5 if post.out_dtype == "float32" else 2.0**-8  # bf16 results: rounded to 8 significant bits
    got = tftvm.op(unit.matmul_bf16(k, n, post))(*inputs).numpy()
    assert got.dtype == post.out_dtype
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=rtol, atol=1e-5 * np.abs(want).max())
    # the conv kernel: the same post-ops on [1, rows, 1, n] as a 1x1 conv's output
    conv = tftvm.op(unit.conv2d_bf16(rows, 1, k, n, (1, 1), (1, 1), (1, 1), post))
    images = [tf.reshape(inputs[0], [1, rows, 1, k]), tf.constant(packed[:, None, None]), inputs[2]]
    images += [tf.reshape(inputs[3], [1, rows, 1, n])] if post.residual else []
    got = conv(*images).numpy().reshape(rows, n)
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=rtol, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize("n", [8, 24, 48, 80])
def test_the_kernels_write_only_the_columns_there_are(rng, unit, n):
    """B packed with zero columns to whole blocks of 32; the output, bias and residual have n
    columns, and the last block writes only its share (with its post-ops)."""
    k, rows = 64, 17
    post = PostOps(residual=True, activation="relu")
    a, b = _bf16(rng.standard_normal((rows, k))), _bf16(rng.standard_normal((k, n)))
    bias, residual = rng.standard_normal(n).astype(np.float32), rng.standard_normal((rows, n)).astype(np.float32)
    wide = np.zeros((k, vnni_layout.padded_columns(n)), b.dtype)
    wide[:, :n] = b
    packed = wide.reshape(k // 2, 2, -1, 16).transpose(2, 0, 3, 1).copy()
    assert packed.shape == vnni_layout.packed_shape(k, n)
    product = a.astype(np.float64) @ b.astype(np.float64)
    got = tftvm.op(unit.matmul_bf16(k, n))(tf.constant(a), tf.constant(packed)).numpy()
    assert got.shape == (rows, n)
    np.testing.assert_allclose(got, product, rtol=1e-5, atol=1e-5 * np.abs(product).max())
    want = np.maximum(product + bias + residual, 0)
    got = tftvm.op(unit.matmul_bf16(k, n, post))(a, packed, bias, residual).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    conv = tftvm.op(unit.conv2d_bf16(1, rows, k, n, (1, 1), (1, 1), (1, 1), post))
    got = conv(a.reshape(1, 1, rows, k), packed[:, None, None], bias, residual.reshape(1, 1, rows, n)).numpy()
    np.testing.assert_allclose(got.reshape(rows, n), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def _biased_product_then(activation, w, b):
    """A Relax main(x [rows, 64], z [rows, 48]): y = x · w + b, then activation(y, z)."""
    bb = relax.BlockBuilder()
    rows = tvm.tirx.Var("rows", "int64")
    x = relax.Var("x", relax.TensorType([rows, 64], "float32"))
    z = relax.Var("z", relax.TensorType([rows, 48], "float32"))
    with bb.function("main", [x, z]):
        with bb.dataflow():
            y = bb.emit(relax.op.add(relax.op.matmul(x, relax.const(w)), relax.const(b)))
            out = bb.emit_output(activation(relax.op, y, z))
        bb.emit_func_output(out)
    return bb.get()


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


@pytest.mark.skipif(not (AMX or AVX512_BF16), reason="this CPU has no bf16 instructions tftvm uses")
@pytest.mark.parametrize("activation, reference, kernel", [
    (lambda op, y, z: op.multiply(y, op.sigmoid(y)), lambda y, z: y * _sigmoid(y), "_bias_swish"),
    (lambda op, y, z: op.multiply(op.sigmoid(y), y), lambda y, z: y * _sigmoid(y), "_bias_swish"),
    # a gate, not a swish: the product's value is read by the sigmoid alone, or by the multiply alone
    (lambda op, y, z: op.multiply(z, op.sigmoid(y)), lambda y, z: z * _sigmoid(y), "_bias"),
    (lambda op, y, z: op.multiply(y, op.sigmoid(z)), lambda y, z: y * _sigmoid(z), "_bias")],
    ids=["swish", "swish-swapped", "gate-of-z", "y-gated-by-z"])  # fmt: skip
def test_a_swish_after_a_bf16_product_is_written_by_its_kernel(rng, activation, reference, kernel):
    w, b = _bf16(rng.standard_normal((64, 48))).astype(np.float32), rng.standard_normal(48).astype(np.float32)
    report = PrecisionReport()
    mod = precision.to_bf16(_biased_product_then(activation, w, b), report=report)
    kernels = [gv.name_hint for gv in mod.get_global_vars() if "_bf16_" in gv.name_hint]
    assert report.post_ops == 1 and any(name.endswith("_bf16_64x48" + kernel) for name in kernels), kernels
    x, z = _bf16(rng.standard_normal((5, 64))), rng.standard_normal((5, 48)).astype(np.float32)
    vm = relax.VirtualMachine(tvm.compile(mod, target=resolve_target(None)), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x.astype(np.float32)), tvm.runtime.tensor(z)).numpy()
    want = reference(x.astype(np.float64) @ w + b, z)  # x and w already bf16 values: the product is exact
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def _inverted_residual_model():
    """MobileNetV2's block shape: 1x1 expand (bias, ReLU6) -> depthwise 3x3 -> 1x1 project, once
    with SAME padding and once with Keras' ZeroPadding2D before a stride-2 depthwise conv; a
    third expand is read by a depthwise conv and by an add."""
    keras.utils.set_random_seed(0)
    layers = keras.layers
    image = keras.Input((10, 10, 16))
    h = layers.ReLU(6.0)(layers.Conv2D(48, 1, bias_initializer="normal")(image))
    h = layers.DepthwiseConv2D(3, padding="same", bias_initializer="normal")(h)
    h = layers.Conv2D(24, 1, bias_initializer="normal")(h)
    e = layers.ReLU(6.0)(layers.Conv2D(64, 1, bias_initializer="normal")(h))
    e = layers.DepthwiseConv2D(3, strides=2, bias_initializer="normal")(layers.ZeroPadding2D(((0, 1), (0, 1)))(e))
    e = layers.Conv2D(32, 1, bias_initializer="normal")(e)
    f = layers.ReLU(6.0)(layers.Conv2D(32, 1, bias_initializer="normal")(e))
    out = layers.DepthwiseConv2D(3, padding="same", bias_initializer="normal")(f) + f
    return keras.Model(image, out), [tf.TensorSpec([None, 10, 10, 16])]


@pytest.mark.skipif(not (AMX or AVX512_BF16), reason="this CPU has no bf16 instructions tftvm uses")
@pytest.mark.parametrize("path", ["compile_model", "optimize"])
def test_a_product_read_only_by_depthwise_convs_writes_bf16(rng, path):
    """The two expands whose only readers are depthwise convs (one through its zero padding)
    write bf16, which the convs read, and so do the two projections read only by the next
    expand (a bf16 product); the third expand, also read by an add, writes f32."""
    model, signature = _inverted_residual_model()
    x = rng.standard_normal((2, 10, 10, 16)).astype(np.float32)
    compiled = getattr(tftvm, path)(model, signature, precision="bf16", keep_faster=False)
    report = compiled.precision
    assert report.bf16_outputs == 4 and "4 writing bf16" in report.text(), report.text()
    error = _relative(model(x).numpy(), np.asarray(compiled(x)))
    assert 1e-5 < error <= BF16_RTOL


def _dense_and_conv_model():
    """Dense layers on a sequence (k = 64, 96: AMX's multiples of 32; n = 10, short of a
    column block); convs: 3x3 stride 2 on 3 channels (k = 3: f32 on AMX, 4 on AVX512-BF16),
    1x1 (k = 32: a matmul over pixels), 3x3 SAME with a residual add and ReLU (k = 64), 3x3
    with n = 8 (an odd image side). Biases are random: a zero bias add is folded away when the
    graph is frozen. Post-ops: every bf16 product's bias, the 1x1's and the 3-channel conv's
    ReLU, the residual conv's residual and ReLU."""
    keras.utils.set_random_seed(0)
    layers = keras.layers
    tokens, image = keras.Input((12, 64)), keras.Input((9, 9, 3))
    h = layers.Dense(96, activation="gelu", bias_initializer="normal")(tokens)
    text = layers.Dense(10, bias_initializer="normal")(h)
    c = layers.Conv2D(32, 3, strides=2, padding="same", activation="relu", bias_initializer="normal")(image)
    c = layers.Conv2D(64, 1, activation="relu", bias_initializer="normal")(c)
    c = layers.ReLU()(layers.Conv2D(64, 3, padding="same", bias_initializer="normal")(c) + c)
    c = layers.Conv2D(8, 3, padding="same", bias_initializer="normal")(c)
    signature = [[tf.TensorSpec([None, 12, 64]), tf.TensorSpec([None, 9, 9, 3])]]
    return keras.Model([tokens, image], [text, c]), signature


def _inputs(rng, batch=3):
    return [[rng.standard_normal((batch, 12, 64)).astype(np.float32),
             rng.standard_normal((batch, 9, 9, 3)).astype(np.float32)]]  # fmt: skip


def _check_bf16(want, got, report: PrecisionReport, units: str = HOST_UNIT, counts=HOST_COUNTS):
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
    assert ("precision: bf16" in compiled.report()) == bool(HOST_UNIT)


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
    assert max(errors) <= (BF16_RTOL if HOST_UNIT else 1e-5)
    counts = [tuple(map(int, m)) for m in re.findall(rf"bf16 on {HOST_UNIT}: (\d+) of (\d+) matmuls/convs, (\d+)",
                                                     rewrite.report)]  # fmt: skip
    assert tuple(map(sum, zip(*counts))) == (HOST_COUNTS if HOST_UNIT else ()), rewrite.report


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
    _check_bf16(want, got, compiled.precision, units=units, counts=(6, 6, 6))
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
    assert _relative(model(x).numpy(), got) <= (BF16_RTOL if HOST_UNIT else 1e-5)
    assert optimized.precision.in_bf16 == (2 if HOST_UNIT else 0)
