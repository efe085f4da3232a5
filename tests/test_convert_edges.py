"""Converters on the values where kernels differ: NaN, infinities, signed zeros, denormals,
int extremes, bad indices, each against TF itself (or NumPy where TF's two CPU kernels
disagree with each other)."""
import numpy as np
import pytest
import tensorflow as tf
from tftvm.graph.frontend import Unsupported, to_relax
from tftvm.graph.lowering.program import RelaxProgram

from conftest import check_converter, tf_graph

F32 = tf.float32
# Denormals differ by their own size at most: TF's kernels run with denormals-are-zero,
# and some of TVM's libm calls do not see that flag (the result, not the class, differs).
DENORMAL = 1e-37

EDGES = np.array([0.0, -0.0, 1e-40, -1e-40, 1e-30, -1e-30, 1e-4, -3e-4, 0.07, -0.5, 0.5, 1.0, -1.0, 0.9999999,
                  3.0, -7.5, 100.0, -100.0, 1e10, -1e10, np.inf, -np.inf, np.nan], np.float32)  # fmt: skip

UNARY = {
    "Tan": tf.math.tan, "Atan": tf.math.atan, "Asin": tf.math.asin, "Acos": tf.math.acos, "Sinh": tf.math.sinh,
    "Cosh": tf.math.cosh, "Asinh": tf.math.asinh, "Acosh": tf.math.acosh, "Atanh": tf.math.atanh,
    "Log1p": tf.math.log1p, "Expm1": tf.math.expm1, "Softsign": tf.nn.softsign, "Log": tf.math.log,
    "Sqrt": tf.math.sqrt, "IsNan": tf.math.is_nan, "IsInf": tf.math.is_inf, "IsFinite": tf.math.is_finite,
}  # fmt: skip


@pytest.mark.parametrize("op_type", sorted(UNARY))
def test_unary_on_edge_values(op_type, rng):
    noise = rng.standard_normal(37).astype(np.float32)
    check_converter(UNARY[op_type], [tf.TensorSpec([None], F32)], [[EDGES], [noise]], op_type, rtol=2e-6,
                    atol=DENORMAL)  # fmt: skip


INFINITE = np.array([np.inf, -np.inf, np.inf, -np.inf, 2.0, np.inf, np.inf, 3.0, -np.inf, 2.0, -np.inf, -np.inf,
                     0.5, 2.5, -2.0, -2.5], np.float32)  # fmt: skip
FINITE = np.array([-1e-40, 1e-40, -0.0, 0.0, -1e-30, 5.0, -5.0, np.inf, -np.inf, np.nan, 3.5, -3.5, -7.0, 7.0,
                   5.5, -5.5], np.float32)  # fmt: skip


@pytest.mark.parametrize("op_type, fn", [("FloorMod", tf.math.floormod), ("FloorDiv", tf.math.floordiv),
                                         ("TruncateMod", tf.truncatemod), ("Pow", tf.pow), ("Atan2", tf.math.atan2)],
                         ids=["FloorMod", "FloorDiv", "TruncateMod", "Pow", "Atan2"])  # fmt: skip
def test_binary_on_infinities_and_denormals(op_type, fn):
    """floormod(x, +-inf) is x or the infinity (TF's fmod rule), not NaN; pow of a denormal
    base reads it as 0, as TF's kernels do."""
    feeds = [[FINITE, INFINITE], [INFINITE, FINITE]]
    check_converter(fn, [tf.TensorSpec([None], F32)] * 2, feeds, op_type, rtol=2e-6, atol=DENORMAL)


@pytest.mark.parametrize("dtype", [tf.int8, tf.uint8, tf.int32, tf.int64])
@pytest.mark.parametrize("op_type, fn", [
    ("LeftShift", tf.bitwise.left_shift), ("RightShift", tf.bitwise.right_shift),
    ("BitwiseAnd", tf.bitwise.bitwise_and), ("BitwiseOr", tf.bitwise.bitwise_or),
    ("BitwiseXor", tf.bitwise.bitwise_xor), ("Invert", lambda x, y: tf.bitwise.invert(x)),
], ids=["LeftShift", "RightShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Invert"])  # fmt: skip
def test_int_ops_at_the_extremes(op_type, fn, dtype):
    """Shifts by more than the width or by a negative amount are clamped into [0, bits - 1],
    as TF's kernels do; a left shift wraps, a right shift of a negative copies its sign."""
    info = np.iinfo(dtype.as_numpy_dtype)
    x = np.array([info.min, info.max, 5, 1, 0, 77, info.min, info.max, 3, 100, 2, 9], dtype.as_numpy_dtype)
    if info.min < 0:
        x[[2, 9]] = -5, -100
    y = np.array([1, 1, 70, 3, 0, 2, 100, 3, 7, 63, 8, 31], dtype.as_numpy_dtype)
    if info.min < 0:
        y[[3, 11]] = -3, -1
    check_converter(fn, [tf.TensorSpec([None], dtype)] * 2, [[x, y]], op_type)


@pytest.mark.parametrize("op_type, dtype", [("TruncateDiv", tf.int8), ("TruncateDiv", tf.int32), ("TruncateDiv", tf.int64),
                                            ("TruncateMod", tf.int32), ("TruncateMod", tf.int64)])  # TF: no int8 mod
def test_truncating_int_division_by_constants(op_type, dtype):
    np_dtype = dtype.as_numpy_dtype
    info = np.iinfo(np_dtype)
    x = np.array([info.min, info.max, -5, 5, 1, 0, -1, 77, -77, 3, -3, 100], np_dtype)
    divisors = tf.constant([7, -3, 5, 2, 9, 11, -13, 3, 4, -5, 6, 7], dtype)
    fn = getattr(tf, op_type.lower())
    check_converter(lambda a: fn(a, divisors), [tf.TensorSpec([12], dtype)], [[x]], op_type)


def test_int_division_by_a_tensor_stays_in_tf():
    nodes, inputs, outputs, _ = tf_graph(tf.truncatediv, [tf.TensorSpec([None], tf.int32)] * 2)
    with pytest.raises(Unsupported, match="may hold 0"):
        to_relax(nodes, inputs, outputs)


@pytest.mark.parametrize("op_type", ["Equal", "NotEqual"])
def test_equality_of_bools(op_type):
    fn = (lambda x, y: tf.equal(x > 0, y > 0)) if op_type == "Equal" else (lambda x, y: tf.not_equal(x > 0, y > 0))
    feed = [np.array([1, -1, 1, -1], np.float32), np.array([1, 1, -1, -1], np.float32)]
    check_converter(fn, [tf.TensorSpec([None], F32)] * 2, [feed], op_type)


@pytest.mark.parametrize("width", [4, 37], ids=["narrow", "wide"])
def test_softmax_of_rows_with_nan_or_inf_is_nan(width):
    """A row holding NaN or +inf is NaN throughout, as TF's Eigen kernel
    (TF_ENABLE_ONEDNN_OPTS=0) and exp(x - max) / sum give it. TF's default oneDNN kernel
    gives NaN at some places of such a row and 0 at others, by where they fall in its vectors."""
    rows = np.array([[1, np.inf, 2, 3], [1, np.nan, 2, 3], [np.inf, np.inf, 0, 1], [-np.inf, 0, 1, 2],
                     [-np.inf] * 4, [np.inf, -np.inf, 1, 1], [1, 2, 3, 4]], np.float32)  # fmt: skip
    rows = np.tile(rows, (1, width // 4 + 1))[:, :width]
    nodes, inputs, outputs, _ = tf_graph(tf.nn.softmax, [tf.TensorSpec([None, width], F32)])
    got = RelaxProgram(to_relax(nodes, inputs, outputs), name="softmax_edges")(tf.constant(rows)).numpy()
    with np.errstate(invalid="ignore"):
        shifted = rows - rows.max(axis=1, keepdims=True)
        want = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    assert np.isnan(got[:3]).all() and np.isnan(got[4:6]).all() and not np.isnan(got[[3, 6]]).any()


# Spatial and index ops ------------------------------------------------------------------------

def test_dilation2d_skips_nan_taps_and_the_padding(rng):
    x = rng.standard_normal((1, 5, 5, 2)).astype(np.float32)
    x[0, 2, 2, 0], x[0, 0, 0, 1] = np.nan, np.inf
    fn = lambda x, f: tf.nn.dilation2d(x, f, [1, 1, 1, 1], "SAME", "NHWC", [1, 1, 1, 1])  # noqa: E731
    specs = [tf.TensorSpec([None, 5, 5, 2], F32), tf.TensorSpec([3, 3, 2], F32)]
    check_converter(fn, specs, [[x, rng.standard_normal((3, 3, 2)).astype(np.float32)]], "Dilation2D")


def crop_and_resize(image, boxes, box_index):
    return tf.image.crop_and_resize(image, boxes, box_index, [3, 4], extrapolation_value=0.5)


CROP_SPECS = [tf.TensorSpec([None, 6, 7, 2], F32), tf.TensorSpec([None, 4], F32), tf.TensorSpec([None], tf.int32)]


@pytest.mark.parametrize("method", ["bilinear", "nearest"])
@pytest.mark.parametrize("crop", [[3, 4], [1, 5], [1, 1]], ids=["3x4", "1x5", "1x1"])
@pytest.mark.parametrize("dtype", [F32, tf.uint8], ids=["float32", "uint8"])
def test_crop_and_resize(method, crop, dtype, rng):
    """Boxes inside, flipped, reaching outside the image (extrapolated there) and on pixel
    halves (the nearest pixel by roundf); a crop of 1 samples the box's centre."""
    def fn(image, boxes, box_index):
        return tf.image.crop_and_resize(image, boxes, box_index, crop, method, extrapolation_value=0.5)

    boxes = np.array([[0.1, 0.2, 0.8, 0.9], [0.5, 0.5, 0.2, 0.1], [-0.3, -0.2, 1.4, 1.1], [0, 0, 0.5, 0.5],
                      [0.1, 0.25, 0.9, 0.75]], np.float32)  # fmt: skip
    specs = [tf.TensorSpec([None, 6, 7, 2], dtype), *CROP_SPECS[1:]]
    image = (rng.standard_normal((2, 6, 7, 2)) * 50 + 100).astype(dtype.as_numpy_dtype)
    feeds = [[image, boxes, np.array([0, 1, 1, 0, 1], np.int32)], [image[:1], boxes[:2], np.array([0, 0], np.int32)]]
    check_converter(fn, specs, feeds, "CropAndResize", rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("bad", [2, -1])
def test_crop_and_resize_box_index_outside_the_batch_raises(bad, rng):
    nodes, inputs, outputs, _ = tf_graph(crop_and_resize, CROP_SPECS)
    program = RelaxProgram(to_relax(nodes, inputs, outputs), name="crop_bad_index")
    args = [rng.standard_normal((2, 6, 7, 2)).astype(np.float32), np.zeros((1, 4), np.float32),
            np.array([bad], np.int32)]  # fmt: skip
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"'box_ind' is not in \[0, dim 0 of 'image'\)"):
        program(*[tf.constant(a) for a in args])
    with pytest.raises(tf.errors.OutOfRangeError):
        crop_and_resize(*args)  # TF raises as well


@pytest.mark.parametrize("indices, dims", [([0, 59, 17, 33], [3, 4, 5]), ([13], [7, 2])])
def test_unravel_index(indices, dims):
    fn = lambda i: tf.unravel_index(i, dims)  # noqa: E731
    check_converter(fn, [tf.TensorSpec([None], tf.int32)], [[np.array(indices, np.int32)]], "UnravelIndex")
    scalar = lambda i: tf.unravel_index(i, tf.constant(dims, tf.int64))  # noqa: E731
    check_converter(scalar, [tf.TensorSpec([], tf.int64)], [[np.array(indices[0], np.int64)]], "UnravelIndex")


def test_unravel_index_of_negatives_as_tf():
    fn = lambda i: tf.unravel_index(i, [3, 4, 5])  # noqa: E731  TF does not check them
    check_converter(fn, [tf.TensorSpec([None], tf.int32)], [[np.array([-1, -7, -61, 5], np.int32)]], "UnravelIndex")


def test_unravel_index_out_of_range_raises():
    fn = lambda i: tf.unravel_index(i, [3, 4, 5])  # noqa: E731
    nodes, inputs, outputs, _ = tf_graph(fn, [tf.TensorSpec([None], tf.int32)])
    program = RelaxProgram(to_relax(nodes, inputs, outputs), name="unravel_bad_index")
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"not in \[60\)"):
        program(tf.constant([3, 60], tf.int32))
    with pytest.raises(tf.errors.InvalidArgumentError):
        fn(tf.constant([3, 60], tf.int32))


def test_unravel_index_of_no_indices_raises_as_tf_does():
    fn = lambda i: tf.unravel_index(i, [3, 4, 5])  # noqa: E731
    empty = tf.constant([], tf.int32)
    with pytest.raises(tf.errors.InvalidArgumentError):
        fn(empty)
    nodes, inputs, outputs, _ = tf_graph(fn, [tf.TensorSpec([None], tf.int32)])
    program = RelaxProgram(to_relax(nodes, inputs, outputs), name="unravel_no_indices")
    with pytest.raises(tf.errors.InvalidArgumentError, match="is empty"):
        program(empty)
    np.testing.assert_array_equal(program(tf.constant([59], tf.int32)), fn(tf.constant([59], tf.int32)))
    nodes, inputs, outputs, _ = tf_graph(fn, [tf.TensorSpec([0], tf.int32)])
    with pytest.raises(Unsupported, match="empty vector"):
        to_relax(nodes, inputs, outputs)


# Through the paths, fused: what TVM's simplifier and the calling thread change ------------------

def _paths(fn, spec):
    import tftvm

    traced = tf.function(fn)
    return {"optimize": tftvm.optimize(traced, [spec], keep_faster=False, min_cluster_size=1),
            "compile_model": tftvm.compile_model(traced, [spec], keep_faster=False)}  # fmt: skip


SELF_OPERANDS = {
    "x - x": lambda x: tf.tanh(x - x),
    "x != x": lambda x: tf.cast(tf.not_equal(x * 2.0, x * 2.0), F32) + x,
    "x == x": lambda x: tf.cast(tf.equal(x, x), F32) * 3.0,
    "exp(x) - exp(x)": lambda x: tf.exp(x) - tf.exp(x),
    "squared_difference(x, x)": lambda x: tf.math.squared_difference(x, x) + 1.0,
}


@pytest.mark.parametrize("name", sorted(SELF_OPERANDS))
def test_an_operation_of_a_value_with_itself_keeps_its_nans(name):
    """Fused into one kernel, TVM's simplifier folded x - x to 0 and x != x to false for
    floats: NaNs and infinities vanished (tf.not_equal(x, x) is how code finds NaNs)."""
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 2.0, -3.0], np.float32)
    want = SELF_OPERANDS[name](tf.constant(x)).numpy()
    for path, fn in _paths(SELF_OPERANDS[name], tf.TensorSpec([None], F32)).items():
        np.testing.assert_array_equal(np.asarray(fn(x)), want, err_msg=path)


ZERO_CONSTANTS = {
    "x * 0": lambda x: x * tf.constant(0.0),
    "0 * exp(x)": lambda x: tf.constant(0.0) * tf.exp(x),
    "0 / x": lambda x: tf.constant(0.0) / x,
    "x / 0": lambda x: x / tf.constant(0.0),
    "x + 0": lambda x: x + tf.constant(0.0),
    "floormod(x, 0)": lambda x: tf.math.floormod(x, tf.constant(0.0)),
    "scalar x * 0": lambda x: tf.reduce_sum(x) * tf.constant(0.0),
}


@pytest.mark.parametrize("name", sorted(ZERO_CONSTANTS))
def test_arithmetic_with_a_constant_zero_as_ieee_gives_it(name):
    """A scalar zero became an immediate, and TVM's simplifier folded x * 0 and 0 / x to 0,
    x + 0 to x (TF: +0 at x = -0), and refused x / 0 with 'Divide by zero'."""
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 2.0, -3.0], np.float32)
    want = ZERO_CONSTANTS[name](tf.constant(x)).numpy()
    for path, fn in _paths(ZERO_CONSTANTS[name], tf.TensorSpec([None], F32)).items():
        got = np.asarray(fn(x))
        np.testing.assert_array_equal(got, want, err_msg=path)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=f"{path}: the sign of a zero")


SIGNED_ZERO_SUMS = {
    "1 / sum over an axis of one": lambda x: 1.0 / tf.reduce_sum(x, 1),
    "1 / mean over an axis of one": lambda x: 1.0 / tf.reduce_mean(x, 1, keepdims=True),
    "1 / sum of a row": lambda x: 1.0 / tf.reduce_sum(tf.reshape(x, [-1, 2]), 1),
    "1 / sum of it all": lambda x: 1.0 / tf.reduce_sum(x * 0.0),
}


@pytest.mark.parametrize("name", sorted(SIGNED_ZERO_SUMS))
def test_the_sum_of_one_negative_zero_keeps_its_sign_as_in_tf(name):
    """TF passes a reduction over one element on (-0.0 stays -0.0), and sums more from +0.0
    (-0.0 + -0.0 is +0.0 there). TVM's sum of one -0.0 was +0.0, its reciprocal +inf where
    TF gives -inf (found by the graph fuzzer)."""
    x = np.array([[-0.0], [-0.0], [0.0], [-0.0], [2.0], [-3.0], [-0.0], [0.0]], np.float32)
    want = SIGNED_ZERO_SUMS[name](tf.constant(x)).numpy()
    for path, fn in _paths(SIGNED_ZERO_SUMS[name], tf.TensorSpec([None, 1], F32)).items():
        np.testing.assert_array_equal(np.asarray(fn(x)), want, err_msg=path)


NONE_AXIS_SUMS = {
    "1 / sum": lambda v: 1.0 / tf.reduce_sum(v, 0),
    "1 / mean": lambda v: 1.0 / tf.reduce_mean(v, 0, keepdims=True),
    "1 / sum of it all": lambda v: 1.0 / tf.reduce_sum(v[:, :1]),
}


@pytest.mark.parametrize("name", sorted(NONE_AXIS_SUMS))
def test_a_none_axis_that_holds_one_element_when_called_keeps_a_negative_zero(name):
    """The same over a `None` axis: one row as called passes its -0.0 on (1 / sum: -inf, as
    in TF), two rows of -0.0 sum to +0.0 (+inf), none to +0.0 (a mean: NaN)."""
    fn = NONE_AXIS_SUMS[name]
    for rows in ([[-0.0, -0.0]], [[-0.0, 1.0], [-0.0, -2.0]], np.zeros((0, 2))):
        x = np.asarray(rows, np.float32).reshape(-1, 2)
        want = fn(tf.constant(x)).numpy()
        for path, compiled in _paths(fn, tf.TensorSpec([None, 2], F32)).items():
            np.testing.assert_array_equal(np.asarray(compiled(x)), want, err_msg=f"{path}, {len(x)} rows")


def test_compile_model_reads_denormals_as_zero_as_tf_does():
    """TF's threads (where TvmCall kernels run) flush denormals; compile_model's VM is called
    from Python's thread, which now flushes them too while it runs."""
    x = np.array([1e-40, -1e-40, 1e-30, 0.0, -2.0], np.float32)
    fn = lambda v: tf.sign(v) + tf.sqrt(tf.abs(v) * -1.0)  # noqa: E731  sqrt(-denormal): -0 read as zero
    want = fn(tf.constant(x)).numpy()
    for path, compiled in _paths(fn, tf.TensorSpec([None], F32)).items():
        np.testing.assert_array_equal(np.asarray(compiled(x)), want, err_msg=path)


def test_arg_max_along_an_axis_that_is_empty_raises_as_tf_does():
    fn = lambda v: tf.argmax(v, 0)  # noqa: E731
    x = np.ones((3, 5), np.float32)
    for path, compiled in _paths(fn, tf.TensorSpec([None, 5], F32)).items():
        np.testing.assert_array_equal(np.asarray(compiled(x)), fn(x).numpy())
        with pytest.raises(tf.errors.InvalidArgumentError):
            compiled(np.ones((0, 5), np.float32))
    with pytest.raises(tf.errors.InvalidArgumentError):
        fn(np.ones((0, 5), np.float32))


@pytest.mark.parametrize("op_type, fn", [("Cumsum", lambda x: tf.math.cumsum(x, 2)),
                                         ("Cumprod", lambda x: tf.math.cumprod(x, -3))], ids=["Cumsum", "Cumprod"])
def test_an_axis_outside_the_rank_stays_in_tf_which_raises(op_type, fn):
    """TF's shape function lets it through; its kernel raises when it runs."""
    nodes, inputs, outputs, _ = tf_graph(fn, [tf.TensorSpec([None, 3], F32)])
    with pytest.raises(Unsupported, match="axis"):
        to_relax(nodes, inputs, outputs)


EMPTY_REDUCTIONS = {
    "Max": lambda a: tf.reduce_max(a, 0), "Min": lambda a: tf.reduce_min(a, 0), "Prod": lambda a: tf.reduce_prod(a, 0),
    "Sum": lambda a: tf.reduce_sum(a, 0), "Mean": lambda a: tf.reduce_mean(a, 0, keepdims=True),
    "All": lambda a: tf.reduce_all(a > 0, 0), "Any": lambda a: tf.reduce_any(a > 0, 0),
    "EuclideanNorm": lambda a: tf.raw_ops.EuclideanNorm(input=a, axis=[0]),
}  # fmt: skip


@pytest.mark.parametrize("spec", [[None, 3], [0, 3], [0, None]], ids=["symbolic", "static", "static_by_symbolic"])
@pytest.mark.parametrize("op_type", sorted(EMPTY_REDUCTIONS))
def test_a_reduction_over_no_elements_gives_tfs_identity(op_type, spec):
    """TVM's reductions start from their identity in their first step: over no elements they
    gave whatever the output's memory held (-1082130432 for an int prod, 1e-45 for a max)."""
    feeds = [[np.zeros((0, 3), np.float32)]]
    if spec[0] is None:
        feeds.append([np.full((2, 3), -2.0, np.float32)])
    if spec[1] is None:
        feeds.append([np.zeros((0, 4), np.float32)])
    check_converter(EMPTY_REDUCTIONS[op_type], [tf.TensorSpec(spec, F32)], feeds, op_type)


@pytest.mark.parametrize("op_type", ["Max", "Prod"])
def test_an_int_reduction_over_no_elements_gives_tfs_identity(op_type):
    feeds = [[np.zeros((0, 3), np.int32)], [np.full((2, 3), 3, np.int32)]]
    check_converter(EMPTY_REDUCTIONS[op_type], [tf.TensorSpec([None, 3], tf.int32)], feeds, op_type)


@pytest.mark.parametrize("op_type", ["All", "Any"])
def test_all_and_any_over_no_elements_through_the_paths(op_type):
    """Fused, a select of bools between the identity and the reduction failed TVM's LLVM
    codegen in compile_model (int8x64 against boolx64): the identity is chosen as an int8."""
    fn = (lambda a: tf.reduce_all(a, 0)) if op_type == "All" else (lambda a: tf.reduce_any(a, 0))
    for shape in ((0, 0), (3, 0)):
        x = np.zeros(shape, bool)
        for path, compiled in _paths(fn, tf.TensorSpec([None, 0], tf.bool)).items():
            np.testing.assert_array_equal(np.asarray(compiled(x)), fn(x).numpy(), err_msg=path)


@pytest.mark.parametrize("spec, shape", [([None, 0, 0], (5, 0, 0)), ([None, 0], (1, 0)), ([1, 0], (1, 0))],
                         ids=["symbolic_batch", "symbolic_one", "static"])  # fmt: skip
def test_a_reshape_of_no_elements_keeps_no_elements(spec, shape):
    """Relax's reshape reads a target dim of 0 as "the input's dim here": [-1] of a (5, 0, 0)
    tensor came out (5,) of zeros."""
    check_converter(lambda a: tf.reshape(a, [-1]), [tf.TensorSpec(spec, F32)], [[np.zeros(shape, np.float32)]],
                    "Reshape")  # fmt: skip


def test_a_step_of_a_step_of_a_symbolic_dim():
    """x[..., ::2] of x[..., ::2]: TOPI's slice of a dim that is a step already put a select
    into its shape, which neither a tftvm op nor compile_model's VM plan took."""
    fn = lambda a: (a[..., ::2], a[..., ::2][..., ::3] * 2.0)  # noqa: E731
    for path, compiled in _paths(fn, tf.TensorSpec([None], F32)).items():
        for n in (0, 1, 2, 7, 12):
            x = np.arange(n, dtype=np.float32)
            for got, want in zip(compiled(x), fn(tf.constant(x))):
                np.testing.assert_array_equal(np.asarray(got), want.numpy(), err_msg=f"{path}, {n} elements")


def test_compile_model_of_a_static_result_with_no_elements():
    """The reshape's zeros fold to a constant with no elements, which TVM 0.27's VM executable
    saved but could not load back ('Invalid DLTensor file format')."""
    fn = lambda a: (tf.reshape(a, [3, 0]), a + 1.0)  # noqa: E731
    x = np.zeros((0, 3), np.float32)
    for path, compiled in _paths(fn, tf.TensorSpec([0, 3], F32)).items():
        for got, want in zip(compiled(x), fn(tf.constant(x))):
            np.testing.assert_array_equal(np.asarray(got), want.numpy(), err_msg=path)
            assert np.asarray(got).shape == tuple(want.shape), path


NOT_EQUAL = {
    "to a constant": lambda x: tf.not_equal(x, 2.0),
    "abs(x) != x": lambda x: tf.not_equal(tf.abs(x), x),
    "abs(x) == x": lambda x: tf.equal(tf.abs(x), x),
}


@pytest.mark.parametrize("name", sorted(NOT_EQUAL))
def test_float_comparisons_with_a_nan_as_tf(name):
    """TVM emitted LLVM's ordered `fcmp one` for !=, false at a NaN (TF: true), and its
    simplifier rewrote abs(x) != x as x < 0 once fused."""
    x = np.array([np.nan, -1.0, 2.0, -np.inf, 0.0, -0.0], np.float32)
    want = NOT_EQUAL[name](tf.constant(x)).numpy()
    for path, fn in _paths(NOT_EQUAL[name], tf.TensorSpec([None], F32)).items():
        np.testing.assert_array_equal(np.asarray(fn(x)), want, err_msg=path)


EDGE_ACTIVATIONS = {
    "elu": tf.nn.elu,
    "selu": tf.nn.selu,
}


@pytest.mark.parametrize("name", sorted(EDGE_ACTIVATIONS))
def test_activations_round_and_keep_signs_as_tf_does(name):
    """elu(-0.0) and selu(-0.0) are -0.0 in TF (its select takes x < 0 for the exp side; found
    by the graph fuzzer)."""
    fn = EDGE_ACTIVATIONS[name]
    x = np.array([-0.0, 0.0, -7.461146831512451, -6.1035156e-05, 1.4, -20.0, 20.0, np.nan, -np.inf, np.inf],
                 np.float32)  # fmt: skip
    want = fn(tf.constant(x)).numpy()
    for path, compiled in _paths(fn, tf.TensorSpec([None], F32)).items():
        got = np.asarray(compiled(x))
        # exp(x) - 1 near 0 cancels: an ulp of exp (1.2e-7 at 1) is what elu and selu may differ by
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=5e-7, err_msg=path)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=path)


def test_softplus_keeps_its_precision_where_it_is_small():
    """softplus(x) for x < 0 is about exp(x): log(1 + exp(x)) rounded 1 + exp(x) first, off by
    2% at x = -13 and 0 instead of 2e-9 at x = -20. TF's formula (log1p(exp(x)), exp(x) below
    log(epsilon) + 2) keeps it to an ulp or two. Found by the graph fuzzer, where a truncatemod
    by softplus(x) made one ulp of the divisor much of the result (TF's own softplus differs by
    an ulp with the element's place in its vector, so the check is against float64)."""
    x = np.concatenate([np.linspace(-30, 30, 601), [-7.461146831512451, -6.1e-05, 0.0, -0.0]]).astype(np.float32)
    want = np.log1p(np.exp(x.astype(np.float64)))
    # TF itself, as the reference's check (its exp(x) for log1p(exp(x)) below the threshold costs e/2)
    np.testing.assert_allclose(tf.nn.softplus(x).numpy(), want, rtol=6e-7)
    for path, compiled in _paths(tf.nn.softplus, tf.TensorSpec([None], F32)).items():
        np.testing.assert_allclose(np.asarray(compiled(x)), want, rtol=6e-7, err_msg=path)


def test_erf_of_a_tiny_x_is_not_flushed_to_zero():
    """erf(x) is about 1.128 x near 0; the fast rational form multiplies x by 0.016 first,
    a denormal below |x| ~ 7e-37, which the kernels' threads flush (as TF's do): erf was 0
    there, and erf(x) / erf(x) NaN where TF gives 1 (found by the graph fuzzer)."""
    import math

    x = np.array([1.1754943508222875e-38, -2e-38, 1e-30, -1e-20, 1e-10, 3e-5, -9.9e-5, 1.01e-4, 0.3, 0.0, -0.0],
                 np.float32)  # fmt: skip
    want = np.array([math.erf(2.0 * float(v)) for v in x])
    fn = lambda v: tf.math.erf(v * 2.0)  # noqa: E731  one kernel of two ops (one op alone stays in TF)
    for path, compiled in _paths(fn, tf.TensorSpec([None], F32)).items():
        got = np.asarray(compiled(x))
        np.testing.assert_allclose(got, want, rtol=3e-7, atol=0, err_msg=path)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(x), err_msg=path)


def test_a_transpose_of_static_dims_with_no_elements_compiles():
    """A transpose of dims [0, 1] only reorders a dim of 1: Relax's RewriteDataflowReshape
    makes such a kernel a reshape, and derived [1, 1] for it, which Relax refused, so
    compile_model raised where TF gives an empty [1, 0] (found by the graph fuzzer)."""
    fn = lambda v: (tf.abs(v), tf.transpose(tf.abs(v)))  # noqa: E731
    x = np.zeros((0, 1), np.float32)
    for path, compiled in _paths(fn, tf.TensorSpec([0, 1], F32)).items():
        got = [np.asarray(t) for t in compiled(x)]
        assert [g.shape for g in got] == [(0, 1), (1, 0)], path


def test_tanh_of_a_tiny_x_is_x_as_in_tf():
    """TF's tanh returns x itself for |x| < 3.5e-4, where the rational form was an ulp off:
    tanh(x) > x and tanh(x) != x then gave other answers than TF's (found by the graph fuzzer)."""
    x = np.array([1e-38, -3e-20, 1e-8, -2.5e-5, 3.4e-4, -3.4e-4, 0.0, -0.0, 0.5, -3.0, np.nan], np.float32)
    fn = lambda v: (tf.tanh(v), tf.greater(tf.tanh(v), v), tf.not_equal(tf.tanh(v), v))  # noqa: E731
    want = [t.numpy() for t in fn(tf.constant(x))]
    for path, compiled in _paths(fn, tf.TensorSpec([None], F32)).items():
        got = [np.asarray(t) for t in compiled(x)]
        np.testing.assert_allclose(got[0], want[0], rtol=3e-7, atol=0, err_msg=path)
        np.testing.assert_array_equal(got[1], want[1], err_msg=path)
        np.testing.assert_array_equal(got[2], want[2], err_msg=path)
