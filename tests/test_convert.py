"""Each TF->Relax converter, compiled by TVM and run as tftvm ops, against TF itself."""
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.compiler.tf2xla.python import xla
from tftvm.graph.frontend import CONVERTERS, Unsupported, to_relax
from tftvm.graph.lowering.program import RelaxProgram

from conftest import check_converter, run_python

F = "float32"


def repeat_each_head(x, times=3):
    """[batch, keys, heads, depth] with each head repeated `times` over, as Keras' repeat does."""
    return tf.reshape(tf.tile(tf.expand_dims(x, 3), [1, 1, 1, times, 1]), [-1, x.shape[1], x.shape[2] * times, x.shape[3]])


CASES = {
    "AddV2": (lambda x, y: x + y, [(3, 4), (4,)]),
    "Sub": (lambda x, y: x - y, [(3, 4), (3, 4)]),
    "Mul": (lambda x, y: x * y, [(2, 3), (2, 3)]),
    "RealDiv": (lambda x, y: x / (tf.abs(y) + 1.0), [(5,), (5,)]),
    "Maximum": (tf.maximum, [(4, 2), (4, 2)]),
    "Minimum": (tf.minimum, [(4, 2), (2,)]),
    "Pow": (lambda x, y: tf.pow(tf.abs(x) + 0.5, y), [(6,), (6,)]),
    "SquaredDifference": (tf.math.squared_difference, [(3, 3), (3, 3)]),
    "Relu": (tf.nn.relu, [(4, 5)]),
    "Relu6": (lambda x: tf.nn.relu6(x * 8.0), [(4, 5)]),
    "Elu": (tf.nn.elu, [(7,)]),
    "Selu": (tf.nn.selu, [(7,)]),
    "Softplus": (lambda x: tf.nn.softplus(x * 30.0), [(9,)]),
    "Sigmoid": (tf.sigmoid, [(3, 2)]),
    "Tanh": (tf.tanh, [(3, 2)]),
    "Exp": (tf.exp, [(5,)]),
    "Log": (lambda x: tf.math.log(tf.abs(x) + 0.1), [(5,)]),
    "Sqrt": (lambda x: tf.sqrt(tf.abs(x)), [(5,)]),
    "Rsqrt": (lambda x: tf.math.rsqrt(tf.abs(x) + 0.1), [(5,)]),
    "Neg": (tf.negative, [(5,)]),
    "Square": (tf.square, [(5,)]),
    "Erf": (tf.math.erf, [(5,)]),
    "BiasAdd": (tf.nn.bias_add, [(2, 3, 4), (4,)]),
    "MatMul": (lambda a, b: tf.matmul(a, b, transpose_b=True), [(3, 4), (5, 4)]),
    "MatMul/tiled": (lambda a, b: tf.matmul(a, b, transpose_b=True), [(3, 8), (16, 8)]),
    "BatchMatMulV2": (lambda a, b: tf.linalg.matmul(a, b, adjoint_a=True), [(2, 4, 3), (2, 4, 5)]),
    "BatchMatMulV2/adj_y": (lambda a, b: tf.linalg.matmul(a, b, adjoint_b=True), [(2, 5, 4), (2, 7, 4)]),
    "BatchMatMulV2/tiled": (lambda a, b: tf.linalg.matmul(a, b, adjoint_b=True), [(2, 3, 8), (2, 16, 8)]),
    "BatchMatMulV2/broadcast": (lambda a, b: tf.linalg.matmul(a, b, adjoint_b=True), [(2, 5, 4), (1, 7, 4)]),
    # A decode step's attention as Keras writes it: scores K·qᵀ of one column, probabilities
    # (one row) times V, both caches transposed first (one einsum over the caches as they are).
    "BatchMatMulV2/one_column": (lambda k, q: tf.matmul(tf.transpose(k, (0, 2, 1, 3)), tf.transpose(q, (0, 2, 3, 1))),
                                 [(2, 6, 3, 8), (2, 1, 3, 8)]),
    "BatchMatMulV2/one_row": (lambda p, v: tf.matmul(p, tf.transpose(v, (0, 2, 1, 3))), [(2, 3, 1, 6), (2, 6, 3, 8)]),
    # Grouped-query attention: 2 key/value heads repeated for 6 query heads, as Keras' repeat
    # writes it (ExpandDims, Tile, Reshape).
    "BatchMatMulV2/gqa_scores": (lambda q, k: tf.matmul(tf.transpose(q, (0, 2, 1, 3)),
                                                        tf.transpose(repeat_each_head(k), (0, 2, 3, 1))),
                                 [(2, 1, 6, 8), (2, 5, 2, 8)]),  # fmt: skip
    "BatchMatMulV2/gqa_values": (lambda p, v: tf.matmul(p, tf.transpose(repeat_each_head(v), (0, 2, 1, 3))),
                                 [(2, 6, 1, 5), (2, 5, 2, 8)]),  # fmt: skip
    "Softmax": (tf.nn.softmax, [(3, 6)]),
    "LogSoftmax": (tf.nn.log_softmax, [(3, 6)]),
    "Sum": (lambda x: tf.reduce_sum(x, axis=1), [(3, 4, 2)]),
    "Mean": (lambda x: tf.reduce_mean(x, axis=[0, 2], keepdims=True), [(3, 4, 2)]),
    "Max": (lambda x: tf.reduce_max(x, axis=-1), [(3, 4)]),
    "Min": (lambda x: tf.reduce_min(x, axis=0), [(3, 4)]),
    "Prod": (lambda x: tf.reduce_prod(x, axis=1), [(3, 4)]),
    "Reshape": (lambda x: tf.reshape(x, [4, 6]), [(2, 3, 4)]),
    "Transpose": (lambda x: tf.transpose(x, [2, 0, 1]), [(2, 3, 4)]),
    "ExpandDims": (lambda x: tf.expand_dims(x, 1), [(3, 4)]),
    "Squeeze": (lambda x: tf.squeeze(x, axis=[1]), [(3, 1, 4)]),
    "Cast": (lambda x: tf.cast(x * 10.0, tf.int32), [(6,)]),
    "Conv2D": (lambda x, w: tf.nn.conv2d(x, w, strides=2, padding="SAME"), [(1, 7, 7, 3), (3, 3, 3, 4)]),
    "DepthwiseConv2dNative": (lambda x, w: tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME"),
                              [(2, 5, 5, 3), (3, 3, 3, 2)]),
    "MaxPool": (lambda x: tf.nn.max_pool2d(x, 3, 2, "SAME"), [(1, 7, 7, 2)]),
    "AvgPool": (lambda x: tf.nn.avg_pool2d(x, 3, 2, "SAME"), [(1, 7, 7, 2)]),
    "FusedBatchNormV3": (lambda x, s, o, m, v: tf.compat.v1.nn.fused_batch_norm(
        x, s, o, m, tf.abs(v) + 0.1, is_training=False)[0], [(1, 3, 3, 4), (4,), (4,), (4,), (4,)]),
    "Pad": (lambda x: tf.pad(x, [[1, 0], [2, 1]]), [(3, 4)]),
    "ConcatV2": (lambda x, y: tf.concat([x, y], axis=1), [(2, 3), (2, 5)]),
    "Pack": (lambda x, y: tf.stack([x, y], axis=1), [(2, 3), (2, 3)]),
    "Erfc": (tf.math.erfc, [(5,)]),
    "StopGradient": (lambda x: tf.stop_gradient(x) * 2.0, [(3,)]),
    "IdentityN": (lambda x, y: tf.raw_ops.IdentityN(input=[x * 2.0, y])[0] + 1.0, [(3,), (2,)]),
    "GatherV2": (lambda x: tf.gather(x, [2, 0, 2], axis=1), [(3, 4)]),
    "StridedSlice": (lambda x: x[1:, ::2] + x[:1, 1:3], [(3, 4)]),
    # Rotary embeddings' x[..., None, :] and x[None, ..., 1:]; a shrunk axis beside new ones.
    "StridedSlice/ellipsis": (lambda x: x[..., None, :] + x[None, ..., 1:2, tf.newaxis, ::-1], [(2, 3, 4)]),
    "StridedSlice/new_axis": (lambda x: x[tf.newaxis, 1, :, tf.newaxis] * x[:, None, 2:], [(3, 4)]),
    # A KV-cache update at a computed position (Keras' ops.slice_update), clamped to fit.
    "XlaDynamicUpdateSlice": (lambda x, u: xla.dynamic_update_slice(x, u * 2.0, tf.reduce_sum(
        tf.cast(x > 100.0, tf.int32)) + [1, 9, -1]), [(3, 5, 4), (2, 2, 4)]),  # starts (1, 9, -1) at run time
    "All": (lambda x: tf.cast(tf.reduce_all(x > -0.5, axis=1), F) + tf.cast(tf.reduce_all(x > 9.0), F), [(3, 4)]),
    "Any": (lambda x: tf.cast(tf.reduce_any(x > 0.5, axis=[0], keepdims=True), F), [(3, 4)]),
    "Einsum": (lambda q, k: tf.einsum("bqhd,bkhd->bhqk", q, k), [(2, 3, 4, 5), (2, 6, 4, 5)]),
    "Einsum/ellipsis": (lambda a, b: tf.einsum("...ij,...jk->...ik", a, b), [(2, 3, 4), (2, 4, 5)]),
    "BiasAdd/NCHW": (lambda x, b: tf.nn.bias_add(x, b, data_format="NCHW"), [(2, 3, 4, 4), (3,)]),
    "SelectV2": (lambda x, y: tf.where(x > y, x, y * 2.0), [(3, 4), (4,)]),
    "Select": (lambda x, y: tf.raw_ops.Select(condition=x[:, 0] > 0, x=x, y=y), [(5, 4), (5, 4)]),
    "GreaterEqual": (lambda x, y: tf.cast(x >= y, F), [(3, 4), (3, 4)]),
    "Less": (lambda x, y: tf.cast(x < y, F), [(3, 4), (3, 4)]),
    "LessEqual": (lambda x, y: tf.cast(x <= y, F), [(3, 4), (3, 4)]),
    "Equal": (lambda x, y: tf.cast(tf.equal(x, tf.maximum(x, y)), F), [(3, 4), (3, 4)]),
    "NotEqual": (lambda x, y: tf.cast(tf.not_equal(x, tf.maximum(x, y)), F), [(3, 4), (3, 4)]),
    "LogicalAnd": (lambda x, y: tf.cast(tf.logical_and(x > 0, y > 0), F), [(3, 4), (3, 4)]),
    "LogicalOr": (lambda x, y: tf.cast(tf.logical_or(x > 0, y > 0), F), [(3, 4), (3, 4)]),
    "LogicalNot": (lambda x: tf.cast(tf.logical_not(x > 0), F), [(3, 4)]),
    "FloorDiv": (lambda x, y: tf.math.floordiv(x * 5.0, tf.where(y > 0, y + 0.5, y - 0.5)), [(4, 5), (4, 5)]),
    "FloorMod": (lambda x, y: tf.math.floormod(x * 5.0, tf.where(y > 0, y + 0.5, y - 0.5)), [(4, 5), (4, 5)]),
    "Floor": (lambda x: tf.floor(x * 3.0), [(4, 5)]),
    "Ceil": (lambda x: tf.math.ceil(x * 3.0), [(4, 5)]),
    "Sign": (tf.sign, [(4, 5)]),
    "Sin": (tf.sin, [(4, 5)]),
    "Cos": (tf.cos, [(4, 5)]),
    "ZerosLike": (lambda x: tf.raw_ops.ZerosLike(x=x) + 1.0, [(4, 5)]),
    "OnesLike": (lambda x: tf.raw_ops.OnesLike(x=x) * x, [(4, 5)]),
    "Fill": (lambda x: x + tf.fill([3, 4], 2.5), [(3, 4)]),
    "Tile": (lambda x: tf.tile(x, [2, 3]), [(2, 3)]),
    "LeakyRelu": (lambda x: tf.nn.leaky_relu(x, 0.3), [(4, 5)]),
    "Reciprocal": (lambda x: tf.math.reciprocal(tf.abs(x) + 0.5), [(4, 5)]),
    "AddN": (lambda x, y: tf.add_n([x, y, x]), [(4, 5), (4, 5)]),
    "ClipByValue": (lambda x: tf.raw_ops.ClipByValue(t=x, clip_value_min=-0.5, clip_value_max=0.5), [(4, 5)]),
    "ArgMax": (lambda x: tf.cast(tf.argmax(x, axis=1), F), [(4, 5)]),
    "ArgMin": (lambda x: tf.cast(tf.argmin(x, axis=0), F), [(4, 5)]),
    "Slice": (lambda x: tf.slice(x, [1, 0], [2, -1]), [(4, 5)]),
    "Split": (lambda x: tf.concat(tf.split(x, 2, axis=1)[::-1], axis=1), [(3, 4)]),
    "SplitV": (lambda x: tf.concat(tf.split(x, [1, -1, 2], axis=1)[::-1], axis=1), [(3, 6)]),
    # What TF's gradients emit (a training step under tftvm.enable()).
    "SigmoidGrad": (lambda y, dy: tf.raw_ops.SigmoidGrad(y=tf.sigmoid(y), dy=dy), [(3, 5), (3, 5)]),
    "TanhGrad": (lambda y, dy: tf.raw_ops.TanhGrad(y=tf.tanh(y), dy=dy), [(3, 5), (3, 5)]),
    "ReluGrad": (lambda g, x: tf.raw_ops.ReluGrad(gradients=g, features=x), [(4, 6), (4, 6)]),
    "Relu6Grad": (lambda g, x: tf.raw_ops.Relu6Grad(gradients=g, features=x * 8.0), [(4, 6), (4, 6)]),
    "RsqrtGrad": (lambda y, dy: tf.raw_ops.RsqrtGrad(y=tf.math.rsqrt(tf.abs(y) + 0.5), dy=dy), [(7,), (7,)]),
    "SqrtGrad": (lambda y, dy: tf.raw_ops.SqrtGrad(y=tf.sqrt(tf.abs(y) + 0.5), dy=dy), [(7,), (7,)]),
    "BiasAddGrad": (lambda g: tf.raw_ops.BiasAddGrad(out_backprop=g), [(2, 3, 4, 5)]),
    "BiasAddGrad/NCHW": (lambda g: tf.raw_ops.BiasAddGrad(out_backprop=g, data_format="NCHW"), [(2, 3, 4, 5)]),
    "DivNoNan": (lambda x, y: tf.math.divide_no_nan(x, tf.nn.relu(y)), [(4, 5), (5,)]),
    "Tan": (tf.math.tan, [(4, 5)]),
    "Atan": (tf.math.atan, [(4, 5)]),
    "Asin": (lambda x: tf.math.asin(tf.tanh(x)), [(4, 5)]),
    "Acos": (lambda x: tf.math.acos(tf.tanh(x)), [(4, 5)]),
    "Sinh": (tf.math.sinh, [(4, 5)]),
    "Cosh": (tf.math.cosh, [(4, 5)]),
    "Asinh": (tf.math.asinh, [(4, 5)]),
    "Acosh": (lambda x: tf.math.acosh(tf.abs(x) + 1.0), [(4, 5)]),
    "Atanh": (lambda x: tf.math.atanh(tf.tanh(x) * 0.999), [(4, 5)]),
    "Log1p": (lambda x: tf.math.log1p(tf.abs(x) * 0.01), [(4, 5)]),
    "Expm1": (lambda x: tf.math.expm1(x * 0.01), [(4, 5)]),
    "Softsign": (tf.nn.softsign, [(4, 5)]),
    "Atan2": (tf.math.atan2, [(4, 5), (5,)]),
    "IsNan": (lambda x: tf.cast(tf.math.is_nan(tf.math.log(x)), F), [(4, 5)]),
    "IsInf": (lambda x: tf.cast(tf.math.is_inf(1.0 / tf.floor(x)), F), [(4, 5)]),
    "IsFinite": (lambda x: tf.cast(tf.math.is_finite(tf.math.log(x)), F), [(4, 5)]),
    "TruncateMod": (lambda x, y: tf.truncatemod(x * 5.0, y), [(4, 5), (4, 5)]),
    "EuclideanNorm": (lambda x: tf.raw_ops.EuclideanNorm(input=x, axis=[0, 2]), [(3, 4, 2)]),
    "ReverseV2": (lambda x: tf.reverse(x, [0, 2]), [(3, 4, 2)]),
    "Roll": (lambda x: tf.roll(x, [1, -3, 2], [0, 1, 0]), [(3, 4, 2)]),
    "Cumprod": (lambda x: tf.math.cumprod(x, axis=1, exclusive=True, reverse=True), [(3, 4)]),
    "LRN": (lambda x: tf.nn.local_response_normalization(x, 2, 1.5, 0.3, 0.75), [(2, 3, 3, 7)]),
    "MaxPool3D": (lambda x: tf.nn.max_pool3d(x, [2, 3, 3], [1, 2, 2], "SAME"), [(1, 4, 7, 7, 2)]),
    "AvgPool3D": (lambda x: tf.nn.avg_pool3d(x, [2, 3, 3], [1, 2, 2], "SAME"), [(1, 4, 7, 7, 2)]),
    "Dilation2D": (lambda x, f: tf.nn.dilation2d(x, f, [1, 2, 1, 1], "SAME", "NHWC", [1, 1, 2, 1]),
                   [(2, 6, 7, 3), (2, 3, 3)]),
}


def graph_of(fn, shapes):
    concrete = tf.function(fn).get_concrete_function(*[tf.TensorSpec(s, F) for s in shapes])
    graph_def = concrete.graph.as_graph_def()
    placeholders = [n for n in graph_def.node if n.op == "Placeholder"]
    nodes = [n for n in graph_def.node if n.op != "Placeholder"]
    inputs = [(p.name, F, s) for p, s in zip(placeholders, shapes)]
    return nodes, inputs, [t.name for t in concrete.outputs], {n.op for n in nodes}


@pytest.mark.parametrize("op_type", sorted(CASES))
def test_converter_matches_tf(op_type, rng):
    fn, shapes = CASES[op_type]
    nodes, inputs, outputs, op_types = graph_of(fn, shapes)
    assert op_type.split("/")[0] in op_types  # the case exercises the converter it is named after
    program = RelaxProgram(to_relax(nodes, inputs, outputs), name=f"convert_{op_type.replace('/', '_')}")
    args = [tf.constant(rng.standard_normal(s).astype(F)) for s in shapes]
    got, want = program(*args), fn(*args)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-5, atol=2e-5)


# Where the leading-None rule does not fit a case (a filter's dims, a fixed target shape),
# its None-dim variant: (fn, shapes, which inputs get a None leading dim). By default every
# input of rank >= 2 does: a vector is usually a feature size that broadcasts.
NONE_CASES = {
    "Conv2D": (CASES["Conv2D"][0], CASES["Conv2D"][1], [0]),
    "DepthwiseConv2dNative": (CASES["DepthwiseConv2dNative"][0], CASES["DepthwiseConv2dNative"][1], [0]),
    "Fill": (lambda x: x + tf.fill([4], 2.5), [(3, 4)], [0]),
    "BatchMatMulV2/broadcast": (CASES["BatchMatMulV2/broadcast"][0], CASES["BatchMatMulV2/broadcast"][1], [0]),
    "Reshape": (lambda x: tf.reshape(x, [-1, 12]), [(2, 3, 4)], [0]),
    "StridedSlice": (lambda x: x[:, ::2] + x[:, 1:3] * x[:, -2:], [(3, 4)], [0]),
    "XlaDynamicUpdateSlice": (CASES["XlaDynamicUpdateSlice"][0], CASES["XlaDynamicUpdateSlice"][1], [0]),
    "Dilation2D": (CASES["Dilation2D"][0], CASES["Dilation2D"][1], [0]),
}


@pytest.mark.parametrize("op_type", sorted(CASES))
def test_converter_matches_tf_with_a_none_dim(op_type, rng):
    fn, shapes = CASES[op_type]
    batched = [i for i, s in enumerate(shapes) if len(s) >= 2]
    if op_type in NONE_CASES:
        fn, shapes, batched = NONE_CASES[op_type]
    specs = [tf.TensorSpec((None, *s[1:]) if i in batched else s, F) for i, s in enumerate(shapes)]
    grown = [(s[0] + 2, *s[1:]) if i in batched else s for i, s in enumerate(shapes)]  # a second batch
    feeds = [[rng.standard_normal(s).astype(F) for s in shapes_] for shapes_ in (shapes, grown)]
    check_converter(fn, specs, feeds, op_type.split("/")[0])


@pytest.mark.parametrize("fn, ops", [
    (lambda x: tf.reshape(x, tf.stack([tf.reduce_prod(tf.shape(x))])), {"Shape", "Prod", "Pack"}),
    (lambda x: tf.reshape(x, tf.concat([tf.shape(x)[1:], tf.shape(x)[:1]], 0)),
     {"Shape", "StridedSlice", "ConcatV2"}),
    (lambda x: tf.reshape(x, tf.gather(tf.shape(x), [0, 2, 1])), {"Shape", "GatherV2"}),
], ids=["prod_pack", "slice_concat", "gather"])  # fmt: skip
def test_shape_arithmetic_on_a_symbolic_dim_feeds_reshape(fn, ops, rng):
    # With a None dim TF cannot fold tf.shape, so the Shape chain reaches the converters.
    nodes, inputs, outputs, op_types = graph_of(fn, [(None, 3, 4)])
    assert ops | {"Reshape"} <= op_types
    program = RelaxProgram(to_relax(nodes, inputs, outputs), name="shape_chain")
    for n in (2, 5):
        x = tf.constant(rng.standard_normal((n, 3, 4)).astype(F))
        np.testing.assert_array_equal(program(x).numpy(), fn(x).numpy())


def test_fill_and_split_over_a_symbolic_dim(rng):
    def fn(x):
        a, b = tf.split(x + tf.fill(tf.shape(x), 0.5), 2, axis=1)
        return a * b

    nodes, inputs, outputs, op_types = graph_of(fn, [(None, 4)])
    assert {"Fill", "Split"} <= op_types
    program = RelaxProgram(to_relax(nodes, inputs, outputs), name="fill_split")
    for n in (2, 6):
        x = tf.constant(rng.standard_normal((n, 4)).astype(F))
        np.testing.assert_allclose(program(x).numpy(), fn(x).numpy(), rtol=1e-6)


def repeat_heads(x):
    """keras_hub's grouped-query attention repeats keys and values as ops.repeat does:
    a Reshape to a shape computed from tf.shape(x) by Mul, ExpandDims, ConcatV2 and Pack."""
    shape = tf.shape(x)
    tiled = tf.tile(tf.expand_dims(x, 3), [1, 1, 1, 2, 1])
    heads = tf.expand_dims(shape[2] * 2, 0)
    return tf.reshape(tiled, tf.concat([shape[:2], heads, shape[3:]], 0))


@pytest.mark.parametrize("fn, ops", [
    (repeat_heads, {"Mul", "ExpandDims", "ConcatV2"}),
    (lambda x: tf.reshape(x, [tf.shape(x)[0] * 2, -1, (tf.shape(x)[2] + 4) // 4]), {"Mul", "AddV2", "FloorDiv"}),
    (lambda x: tf.reshape(x, tf.concat([tf.shape(x)[:1], tf.reshape(tf.maximum(tf.shape(x)[1] - 1, 2) * 6, [1]), [8]], 0)),
     {"Sub", "Maximum", "Reshape"}),
    (lambda x: tf.reshape(x, tf.cast(tf.cast(tf.shape(x), tf.int64) // [1, 1, 4, 1] * [1, 1, 1, 4], tf.int32)),
     {"Cast", "FloorDiv"}),
], ids=["repeat_heads", "mul_add_floordiv", "sub_maximum_scalar", "cast_int64"])  # fmt: skip
def test_shape_arithmetic_converts(fn, ops, rng):
    """Shape values through Mul, Add, Sub, FloorDiv, Maximum (with constants, scalars
    broadcast), ExpandDims, Cast and Reshape stay dims: the Reshape converts, with a None dim."""
    nodes, inputs, outputs, op_types = graph_of(fn, [(None, 3, 4, 8)])
    assert ops | {"Shape"} <= op_types
    program = RelaxProgram(to_relax(nodes, inputs, outputs), name="shape_arithmetic")
    for n in (2, 5):
        x = tf.constant(rng.standard_normal((n, 3, 4, 8)).astype(F))
        np.testing.assert_array_equal(program(x).numpy(), fn(x).numpy())


def test_shape_arithmetic_with_a_computed_tensor_is_unsupported():
    nodes, inputs, outputs, _ = graph_of(lambda x, k: tf.reshape(x, tf.shape(x) * tf.cast(k, tf.int32)),
                                         [(None, 4), (2,)])  # fmt: skip
    with pytest.raises(Unsupported, match="must be a constant"):
        to_relax(nodes, inputs, outputs)


@pytest.mark.parametrize("fn, shapes, why", [
    # An update whose dim may be 0 while the input's is not: the clamped read would leave it.
    (lambda x, u: xla.dynamic_update_slice(x, u, tf.zeros([2], tf.int32)), [(4, 3), (None, 3)], "may be 0"),
    # A dim divided by another dim: TF reports a division by 0, a kernel would trap.
    (lambda x: tf.reshape(x, [-1, tf.shape(x)[1] // tf.shape(x)[0]]), [(None, 4)], "by a symbolic dim"),
], ids=["update_may_be_empty", "floordiv_by_a_dim"])  # fmt: skip
def test_what_could_read_outside_or_divide_by_zero_stays_in_tf(fn, shapes, why):
    nodes, inputs, outputs, _ = graph_of(fn, shapes)
    with pytest.raises(Unsupported, match=why):
        to_relax(nodes, inputs, outputs)


def test_a_shape_value_read_outside_the_cluster_is_handed_over_as_an_int_tensor(rng):
    """Shape values are dims (Python-side) inside a cluster; where TF nodes outside read one,
    a small kernel writes it out as a tensor of the TF output's dtype."""
    fn = lambda x: (x * 2.0, tf.shape(x), tf.cast(tf.shape(x)[0] * 3, tf.int64))  # noqa: E731
    nodes, inputs, outputs, _ = graph_of(fn, [(None, 3)])
    program = RelaxProgram(to_relax(nodes, inputs, outputs), name="shape_out")
    for n in (2, 5):
        x = tf.constant(rng.standard_normal((n, 3)).astype(F))
        for got, want in zip(program(x), fn(x)):
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_size_and_shape_values_read_as_data_run_in_tvm(rng):
    """Size of a symbolic shape, and dims cast to float (a scale by the sequence length): the
    shape chain stays in TVM, its dims made a tensor where a tensor op reads them."""
    import tftvm

    def fn(x):
        y = tf.nn.relu(x * 2.0 + 1.0)
        scale = tf.cast(tf.size(y), F) / tf.cast(tf.shape(y)[1] * 2, F)
        return y * scale, tf.math.lgamma(tf.cast(tf.shape(y) * 2, F))  # Lgamma: no converter

    optimized = tftvm.optimize(tf.function(fn), [tf.TensorSpec([None, 3], F)], keep_faster=False)
    for n in (2, 5):
        x = rng.standard_normal((n, 3)).astype(F)
        for got, want in zip(optimized(x), fn(x)):
            np.testing.assert_allclose(got, want, rtol=1e-6)
    summary = optimized.summary()
    assert [op.op for op in summary.in_tf] == ["Lgamma"], optimized.report()


NAN_CASES = {
    "Relu": (tf.nn.relu, 1),
    "Relu6": (tf.nn.relu6, 1),
    "Maximum": (tf.maximum, 2),  # a NaN in either operand
    "Minimum": (tf.minimum, 2),
    "Max": (lambda x: tf.reduce_max(x, axis=-1), 1),
    "Min": (lambda x: tf.reduce_min(x, axis=0), 1),
    "Sign": (tf.sign, 1),
}


@pytest.mark.parametrize("op_type", sorted(NAN_CASES))
def test_nans_come_out_where_tf_gives_them(op_type, rng):
    """TVM lowers max(a, b) to `a > b ? a : b`: ReLU(NaN) was 0, ReLU6(NaN) 6, a row max
    skipped its NaN. TF passes NaNs on (a diverged model stays visibly NaN); so must we.
    (Not ClipByValue: TF's own gives NaN for a NaN in its scalar loop and a bound in its
    vector loop; ours gives NaN. tf.clip_by_value emits Minimum and Maximum.)"""
    fn, arity = NAN_CASES[op_type]
    values = np.array([np.nan, -2.0, 0.5, 7.0, np.inf, -np.inf], F)
    feeds = []
    for _ in range(3):
        feeds.append([rng.choice(values, (4, 6)).astype(F) for _ in range(arity)])
    assert any(np.isnan(feed[-1]).any() for feed in feeds) and any(np.isnan(feed[0]).any() for feed in feeds)
    program = check_converter(fn, [tf.TensorSpec((4, 6), F)] * arity, feeds, op_type)  # NaNs where TF's are
    assert all(np.isnan(program(*feed).numpy()).any() for feed in feeds if np.isnan(feed[0]).any())


@pytest.mark.parametrize("width", [5, 77, 1031])  # 77, 1031: a vectorized head and a scalar tail
@pytest.mark.parametrize("op, axis", [(tf.argmax, -1), (tf.argmin, -1), (tf.argmax, 0)])
def test_arg_max_and_min_skip_nans_and_take_the_first_tie_as_tf_does(op, axis, width, rng):
    """TF's ArgMax/ArgMin never pick a NaN, give the first of equal values and 0 for a row of
    NaNs. TVM's own gave -1 for a row of -inf and picked NaNs."""
    x = rng.standard_normal((10, width)).astype(F)
    x[1, :] = np.nan
    x[2, 3] = np.nan
    x[3, :] = -np.inf
    x[4, ::2] = 7.0
    x[5, -1] = 50.0  # the extreme in the last element, past any whole vector
    x[6, :] = np.where(rng.random(width) < 0.5, np.nan, 1.0)
    x[7, 0] = np.nan
    x[8, :] = 0.0
    x[8, 1::2] = -0.0
    x[9, :] = np.inf
    fn = lambda v: op(v, axis)  # noqa: E731
    check_converter(fn, [tf.TensorSpec([None, width], F)], [[x], [x[3:5]]], "ArgMax" if op is tf.argmax else "ArgMin")


def test_an_unused_output_of_unknown_rank_does_not_keep_its_node_in_tf(rng):
    """FusedBatchNormV3's 6th output (reserve_space_3, for its gradient) has unknown rank; tf_keras'
    batch norms emit the op, and refusing it left 90% of tf_keras' MobileNetV2 in TF."""
    import tftvm

    w = tf.constant(rng.standard_normal((3, 3, 4, 8)).astype(F))
    stats = [tf.constant(rng.random(8).astype(F) + 0.5) for _ in range(4)]

    def fn(x):
        y = tf.nn.conv2d(x, w, 1, "SAME")
        y = tf.compat.v1.nn.fused_batch_norm(y, *stats, is_training=False)[0]
        return tf.nn.relu(y) * 2.0

    graph = tf.function(fn).get_concrete_function(tf.TensorSpec([None, 8, 8, 4], F)).graph
    norm = next(op for op in graph.get_operations() if op.type == "FusedBatchNormV3")
    assert norm.outputs[5].shape.rank is None and not norm.outputs[5].consumers()
    fast = tftvm.optimize(fn, [tf.TensorSpec([None, 8, 8, 4], F)], keep_faster=False)
    assert fast.summary().fraction == 1.0, fast.report()
    x = rng.standard_normal((2, 8, 8, 4)).astype(F)
    np.testing.assert_allclose(fast(x).numpy(), fn(x).numpy(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("activation", [tf.nn.relu, tf.nn.relu6])
def test_an_activation_over_a_batch_of_1_fuses_into_the_conv_before_it(activation, rng):
    """The NaN-passing ReLU of a static batch of 1 reads its input at its own index, not at 0
    along the batch: FuseOps sees it elementwise and writes it with the conv and bias (as a
    broadcast it ran as a pass of its own), and NaNs still come out where TF's are."""
    def fn(x, w, b):
        return activation(tf.nn.conv2d(x, w, 1, "SAME") + b)

    specs = [tf.TensorSpec((1, 6, 6, 4), F), tf.TensorSpec((1, 1, 4, 8), F), tf.TensorSpec((8,), F)]
    x = rng.standard_normal((1, 6, 6, 4)).astype(F)
    x[0, 2, 3, 1] = np.nan
    feed = [x, rng.standard_normal((1, 1, 4, 8)).astype(F), rng.standard_normal(8).astype(F)]
    program = check_converter(fn, specs, [feed], "Conv2D")
    names = [k.name.split("/")[-1] for k in program.kernels]
    last = {"relu": "relu", "relu6": "clip"}[activation.__name__]  # tf.nn.relu6 converts to clip
    assert len(names) == 1 and names[0].startswith("fused_conv2d") and names[0].endswith(last), names
    assert np.isnan(program(*feed).numpy()).any()


@pytest.mark.parametrize("fill", [0.0, 1.0])
def test_a_zero_pad_before_a_strided_depthwise_conv_is_the_convs_own_padding(fill, rng):
    """Keras' ZeroPadding2D then a "valid" DepthwiseConv2D of stride 2 (MobileNetV2): the pad
    folds into the conv, so no kernel writes a padded copy and the ReLU6 before it is the 1x1
    conv's epilogue; a pad of ones is no conv padding and stays."""
    def fn(x, w, b, dw):
        y = tf.nn.relu6(tf.nn.conv2d(x, w, 1, "SAME") + b)
        y = tf.pad(y, [[0, 0], [0, 1], [0, 1], [0, 0]], constant_values=fill)
        return tf.nn.depthwise_conv2d(y, dw, [1, 2, 2, 1], "VALID")

    shapes = [(1, 9, 9, 4), (1, 1, 4, 16), (16,), (3, 3, 16, 1)]
    feed = [rng.standard_normal(s).astype(F) for s in shapes]
    program = check_converter(fn, [tf.TensorSpec(s, F) for s in shapes], [feed], "DepthwiseConv2dNative")
    names = [k.name.split("/")[-1] for k in program.kernels]
    assert (not any("pad" in n for n in names)) == (fill == 0.0), names
    assert any(n.endswith("clip") for n in names) == (fill == 0.0), names


@pytest.mark.parametrize("activation", ["relu", "relu6", "none"])
def test_a_zero_pad_before_a_max_pool_of_values_never_negative_is_the_pools_own_padding(activation, rng):
    """ResNet's ZeroPadding2D then its first MaxPooling2D: after a ReLU (or ReLU6) the zeros
    never win a window, so the pad folds into the pool's own (-inf) padding and no kernel
    writes a padded copy; before values that can be negative, the zeros can win and the pad stays."""
    act = {"relu": tf.nn.relu, "relu6": tf.nn.relu6, "none": tf.identity}[activation]

    def fn(x, w, b):
        y = tf.pad(act(tf.nn.conv2d(x, w, 1, "SAME") + b), [[0, 0], [1, 1], [1, 1], [0, 0]])
        return tf.nn.max_pool2d(y, 3, 2, "VALID")

    shapes = [(2, 9, 9, 4), (1, 1, 4, 16), (16,)]
    feed = [rng.standard_normal(s).astype(F) for s in shapes]
    feed[2] -= 2.0  # most values negative: the zeros would win the border windows
    program = check_converter(fn, [tf.TensorSpec(s, F) for s in shapes], [feed], "MaxPool")
    names = [k.name.split("/")[-1] for k in program.kernels]
    assert (not any("pad" in n for n in names)) == (activation != "none"), names


def test_table_covers_every_case():
    assert {c.split("/")[0] for c in CASES} <= set(CONVERTERS)


def test_symbolic_batch_dim_compiles_once(rng):
    fn = lambda x, w: tf.nn.relu(tf.matmul(x, w) + 1.0)  # noqa: E731
    concrete = tf.function(fn).get_concrete_function(tf.TensorSpec([None, 4], F), tf.TensorSpec([4, 3], F))
    graph_def = concrete.graph.as_graph_def()
    ph = [n.name for n in graph_def.node if n.op == "Placeholder"]
    nodes = [n for n in graph_def.node if n.op != "Placeholder"]
    out = concrete.outputs[0].name
    program = RelaxProgram(to_relax(nodes, [(ph[0], F, (None, 4)), (ph[1], F, (4, 3))], [out]), name="mlp")
    w = rng.standard_normal((4, 3)).astype(F)
    for n in (1, 5, 17):
        x = tf.constant(rng.standard_normal((n, 4)).astype(F))
        np.testing.assert_allclose(program(x, w).numpy(), fn(x, w).numpy(), rtol=1e-5, atol=1e-5)
    assert 1 <= len(program.kernels) <= 2  # matmul, then the fused add+relu epilogue


def test_unconvertible_op_says_why():
    nodes, inputs, outputs, _ = graph_of(lambda x: tf.math.lgamma(x), [(4,)])
    with pytest.raises(Unsupported, match="no converter for TF op Lgamma"):
        to_relax(nodes, inputs, outputs)


def test_non_constant_shape_is_unsupported():
    nodes, inputs, outputs, _ = graph_of(lambda x, s: tf.reshape(x, tf.cast(s, tf.int32)), [(6,), (2,)])
    with pytest.raises(Unsupported, match="must be a constant"):
        to_relax(nodes, inputs, outputs)


def test_two_none_batch_dims_meet_in_one_shape(rng):
    # An RNN cell's x.W + h.U: each input has its own None batch, so Relax knows two symbols.
    w, u = rng.standard_normal((3, 5)).astype(F), rng.standard_normal((4, 5)).astype(F)

    def cell(x, h):
        return tf.tanh(tf.matmul(x, w) + tf.matmul(h, u))

    specs = [tf.TensorSpec([None, 3], F), tf.TensorSpec([None, 4], F)]
    feeds = [[rng.standard_normal((n, 3)).astype(F), rng.standard_normal((n, 4)).astype(F)] for n in (1, 6)]
    program = check_converter(cell, specs, feeds, "AddV2", rtol=1e-5, atol=1e-5)
    # Batches that differ are an error that names the dims, never a broadcast or a wrong result.
    x, h = rng.standard_normal((2, 3)).astype(F), rng.standard_normal((3, 4)).astype(F)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"must have shape \[d0_0, 5\]"):
        program(tf.constant(x), tf.constant(h))


def test_filled_shape_from_an_input_dim_alone(rng):
    # zeros([batch, 3]) is a kernel with no input: the batch reaches it as a scalar.
    def zeros(x):
        return tf.zeros(tf.stack([tf.shape(x)[0], 3])) + 1.5, x * 2.0

    feeds = [[rng.standard_normal((n, 2)).astype(F)] for n in (1, 4)]
    program = check_converter(zeros, [tf.TensorSpec([None, 2], F)], feeds, "Fill")
    assert any(k.signature.inputs and k.signature.inputs[0].scalar for k in program.kernels)


@pytest.mark.parametrize("keys, depth, dots", [(30, 128, True), (17, 8, True), (32, 8, False), (32, 128, True)])
def test_q_times_k_transposed_runs_as_dot_products_where_they_pay(keys, depth, dots, rng):
    """A·Bᵀ of a computed B: dot products of rows in one einsum kernel where the keys do not
    fill whole vectors or the dots are long (a transpose of 30 keys alone took 3x the time of
    the dot products), a transpose and a matmul over whole vectors of keys otherwise."""
    fn = lambda q, k: tf.linalg.matmul(q, k, transpose_b=True)  # noqa: E731
    shapes = [(2, 6, depth), (2, keys, depth)]
    nodes, inputs, outputs, _ = graph_of(fn, shapes)
    mod = to_relax(nodes, inputs, outputs)
    text = mod.script()
    assert ("einsum" in text, "permute_dims" in text) == (dots, not dots), text
    program = RelaxProgram(mod, name=f"convert_qk_{keys}x{depth}")
    args = [rng.standard_normal(s).astype(F) for s in shapes]
    np.testing.assert_allclose(program(*args).numpy(), fn(*args).numpy(), rtol=2e-5, atol=2e-5)


def test_an_integer_division_by_a_tensor_stays_in_tf_and_a_zero_is_tf_s_error():
    """TF reports an integer division by zero; in a TVM kernel it traps (SIGFPE ended the
    process). A divisor that is a tensor stays in TF; a constant one without zeros converts."""
    code = """
import numpy as np, tensorflow as tf, tftvm
a = tf.constant(np.array([7, -7, 7, -7, 5], np.int32))
for op in (tf.math.floordiv, tf.math.floormod):
    by_tensor = tftvm.optimize(tf.function(lambda x, y: op(x * 3, y + 0)), [tf.TensorSpec([5], tf.int32)] * 2,
                               min_cluster_size=1, keep_faster=False)
    assert "integer division by a tensor that may hold 0" in by_tensor.report(), by_tensor.report()
    b = tf.constant(np.array([2, 2, -2, -2, 3], np.int32))
    np.testing.assert_array_equal(by_tensor(a, b).numpy(), op(a * 3, b).numpy())
    try:
        by_tensor(a, tf.constant(np.array([2, 2, 0, -2, 3], np.int32)))
        raise SystemExit("no error")
    except tf.errors.InvalidArgumentError as err:
        assert "Integer division by zero" in str(err), err
    by_constant = tftvm.optimize(tf.function(lambda x: op(x * 3, tf.constant([2, 2, -2, -2, 3]))),
                                 [tf.TensorSpec([5], tf.int32)], min_cluster_size=1, keep_faster=False)
    assert by_constant.summary().offloaded == by_constant.summary().compute_nodes, by_constant.report()
    np.testing.assert_array_equal(by_constant(a).numpy(), op(a * 3, b).numpy())
print("ok")
"""
    result = run_python(code)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


@pytest.mark.parametrize("exponent", [2.0, 3.0, 4.0, 2.5])
def test_a_power_by_a_small_constant_matches_tf_on_edge_values(exponent):
    """x ** 2, 3 and 4 run as products (ops/math.py), x ** 2.5 as a power: TF's signs, NaN,
    infinities, signed zeros and overflow either way."""
    values = np.array([[np.nan, -2.0, -0.0, 0.0, 0.5, -1.5], [np.inf, -np.inf, 3e12, -3e12, 1e-20, -7.0]], F)
    program = check_converter(lambda x: tf.pow(x, exponent), [tf.TensorSpec((None, 6), F)], [[values]], "Pow")
    got, want = program(tf.constant(values)).numpy(), tf.pow(values, exponent).numpy()
    numbers = ~np.isnan(want)  # (a NaN's sign bit means nothing)
    np.testing.assert_array_equal(np.signbit(got)[numbers], np.signbit(want)[numbers])


@pytest.mark.parametrize("case", ["BatchMatMulV2/one_column", "BatchMatMulV2/one_row", "BatchMatMulV2/gqa_scores",
                                  "BatchMatMulV2/gqa_values"])  # fmt: skip
def test_a_decode_steps_attention_is_one_einsum_over_the_caches_as_they_are(case):
    fn, shapes = CASES[case]
    nodes, inputs, outputs, _ = graph_of(fn, shapes)
    text = to_relax(nodes, inputs, outputs).script()
    einsum = next(line for line in text.splitlines() if "R.einsum" in line)
    cache = "in0" if case.endswith("column") else "in1"
    assert f"({cache}," in einsum or f" {cache})" in einsum, text  # the cache itself, not a transpose or repeat of it
