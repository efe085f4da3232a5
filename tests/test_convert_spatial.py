"""The spatial converters (transposed and 3-D convs, resizes, block moves, mirror pads) against TF."""
import keras
import numpy as np
import pytest
import tensorflow as tf
import tftvm
from tftvm.graph.frontend import Unsupported, to_relax

from conftest import check_converter, tf_graph

F = "float32"


def spec(*shape):
    return tf.TensorSpec(shape, F)


def feeds(rng, *shapes):
    """One feed per shape: the same graph run at several sizes of its None dims."""
    return [[rng.standard_normal(s).astype(F)] for s in shapes]


def weights(rng, *shape):
    return rng.standard_normal(shape).astype(F)  # NumPy: traced as a Const (a big tensor is a capture)


# (out H, W), input H, W, kernel, strides, padding (EXPLICIT: TF's list)
TRANSPOSED = {
    "same_s2": ((8, 8), (4, 4), 3, 2, "SAME"),
    "same_s2_odd": ((7, 5), (4, 3), 3, 2, "SAME"),
    "same_s1_k4": ((5, 6), (5, 6), 4, 1, "SAME"),
    "valid_s2": ((9, 10), (4, 4), 3, 2, "VALID"),
    "valid_s3_output_padding": ((11, 10), (3, 3), 3, 3, "VALID"),
    "explicit": ((7, 8), (4, 4), 3, 2, [[0, 0], [2, 1], [1, 0], [0, 0]]),
}


@pytest.mark.parametrize("case", sorted(TRANSPOSED))
def test_conv2d_backprop_input_symbolic_batch(case, rng):
    (oh, ow), (ih, iw), k, s, padding = TRANSPOSED[case]
    w = weights(rng, k, k, 4, 3)

    def fn(x):  # the output shape follows the batch, as Keras builds it
        return tf.nn.conv2d_transpose(x, w, tf.stack([tf.shape(x)[0], oh, ow, 4]), s, padding)

    check_converter(fn, [spec(None, ih, iw, 3)], feeds(rng, (1, ih, iw, 3), (3, ih, iw, 3)),
                    "Conv2DBackpropInput", rtol=1e-4, atol=1e-4)  # fmt: skip


def test_conv2d_backprop_input_constant_output_shape(rng):
    w = weights(rng, 2, 3, 5, 2)
    fn = lambda x: tf.nn.conv2d_transpose(x, w, [2, 7, 9, 5], [1, 2, 3, 1], "SAME")  # noqa: E731
    check_converter(fn, [spec(2, 4, 3, 2)], feeds(rng, (2, 4, 3, 2)), "Conv2DBackpropInput", rtol=1e-4, atol=1e-4)


# strides, padding, dilations
CONV3D = {
    "valid": ([1, 1, 1, 1, 1], "VALID", [1, 1, 1, 1, 1]),
    "same_strided": ([1, 2, 1, 2, 1], "SAME", [1, 1, 1, 1, 1]),
    "same_dilated": ([1, 1, 1, 1, 1], "SAME", [1, 2, 1, 2, 1]),
}


@pytest.mark.parametrize("case", sorted(CONV3D))
def test_conv3d(case, rng):
    strides, padding, dilations = CONV3D[case]
    w = weights(rng, 2, 3, 2, 2, 3)
    fn = lambda x: tf.nn.conv3d(x, w, strides, padding, dilations=dilations)  # noqa: E731
    check_converter(fn, [spec(None, 4, 5, 4, 2)], feeds(rng, (1, 4, 5, 4, 2), (3, 4, 5, 4, 2)),
                    "Conv3D", rtol=1e-4, atol=1e-4)  # fmt: skip


RESIZE_FLAGS = {"asymmetric": (False, False), "align_corners": (True, False), "half_pixel": (False, True)}
# input H, W -> output H, W: up, down, and to a size of 1 (align_corners divides by size - 1)
RESIZE_SIZES = [((4, 3), (7, 5)), ((6, 5), (3, 2)), ((5, 4), (10, 1))]
# and sizes where TOPI's nearest resize picks other pixels than TF (rounding ties, float error)
NEAREST_SIZES = RESIZE_SIZES + [((3, 5), (5, 9)), ((2, 26), (41, 22))]


@pytest.mark.parametrize("flags", sorted(RESIZE_FLAGS))
@pytest.mark.parametrize("op_type, sizes", [("ResizeBilinear", s) for s in RESIZE_SIZES]
                         + [("ResizeNearestNeighbor", s) for s in NEAREST_SIZES], ids=str)  # fmt: skip
def test_resize_matches_tf(op_type, sizes, flags, rng):
    align, half = RESIZE_FLAGS[flags]
    (ih, iw), out = sizes
    resize = getattr(tf.raw_ops, op_type)
    fn = lambda x: resize(images=x, size=out, align_corners=align, half_pixel_centers=half)  # noqa: E731
    exact = op_type == "ResizeNearestNeighbor"  # a pixel is TF's pixel or it is wrong
    check_converter(fn, [spec(None, ih, iw, 2)], feeds(rng, (1, ih, iw, 2), (3, ih, iw, 2)), op_type,
                    rtol=0 if exact else 1e-5, atol=0 if exact else 1e-5)  # fmt: skip


def test_resize_bilinear_of_integers_gives_float32(rng):
    fn = lambda x: tf.raw_ops.ResizeBilinear(images=x, size=[5, 3], half_pixel_centers=True)  # noqa: E731
    ints = [[rng.integers(-50, 50, (n, 3, 2, 2)).astype("int32")] for n in (1, 2)]
    check_converter(fn, [tf.TensorSpec([None, 3, 2, 2], tf.int32)], ints, "ResizeBilinear", rtol=1e-5, atol=1e-5)


# block shape, paddings (SpaceToBatchND) or crops (BatchToSpaceND), input shape without the batch
BLOCKS = {
    "2d": ([2, 3], [[1, 1], [2, 1]], (4, 3, 2)),
    "2d_no_pad": ([2, 2], [[0, 0], [0, 0]], (4, 6, 3)),
    "1d_with_rest": ([3], [[2, 1]], (6, 2, 2)),
}


@pytest.mark.parametrize("case", sorted(BLOCKS))
def test_space_to_batch_nd(case, rng):
    block, pads, shape = BLOCKS[case]
    fn = lambda x: tf.space_to_batch_nd(x, block, pads)  # noqa: E731
    check_converter(fn, [spec(None, *shape)], feeds(rng, (1, *shape), (3, *shape)), "SpaceToBatchND")


@pytest.mark.parametrize("symbolic", [True, False], ids=["batch_none", "batch_static"])
@pytest.mark.parametrize("case", sorted(BLOCKS))
def test_batch_to_space_nd(case, symbolic, rng):
    block, crops, shape = BLOCKS[case]
    fn = lambda x: tf.compat.v1.batch_to_space_nd(x, block, crops)  # noqa: E731
    n = int(np.prod(block))
    sizes = (n, 3 * n) if symbolic else (2 * n,)
    check_converter(fn, [spec(None if symbolic else 2 * n, *shape)], feeds(rng, *[(b, *shape) for b in sizes]),
                    "BatchToSpaceND")  # fmt: skip


def test_dilated_conv_round_trip(rng):
    # What older graphs hold for a dilated conv: SpaceToBatchND, Conv2D, BatchToSpaceND.
    w = weights(rng, 3, 3, 2, 3)
    fn = lambda x: tf.nn.atrous_conv2d(x, w, rate=2, padding="SAME")  # noqa: E731
    check_converter(fn, [spec(None, 6, 6, 2)], feeds(rng, (1, 6, 6, 2), (2, 6, 6, 2)), "BatchToSpaceND",
                    rtol=1e-4, atol=1e-4)  # fmt: skip


@pytest.mark.parametrize("block", [2, 3])
def test_depth_to_space(block, rng):
    c = 2 * block * block
    fn = lambda x: tf.nn.depth_to_space(x, block)  # noqa: E731
    check_converter(fn, [spec(None, 3, 2, c)], feeds(rng, (1, 3, 2, c), (3, 3, 2, c)), "DepthToSpace")


@pytest.mark.parametrize("block", [2, 3])
def test_space_to_depth(block, rng):
    h, w = 2 * block, 3 * block
    fn = lambda x: tf.nn.space_to_depth(x, block)  # noqa: E731
    check_converter(fn, [spec(None, h, w, 2)], feeds(rng, (1, h, w, 2), (3, h, w, 2)), "SpaceToDepth")


def test_depth_to_space_inverts_space_to_depth(rng):
    fn = lambda x: tf.nn.depth_to_space(tf.nn.space_to_depth(x, 2) * 2.0, 2)  # noqa: E731
    check_converter(fn, [spec(None, 4, 6, 3)], feeds(rng, (1, 4, 6, 3), (2, 4, 6, 3)), "DepthToSpace")


# up to the largest pads TF allows: dim - 1 for REFLECT, dim for SYMMETRIC
@pytest.mark.parametrize("mode, pads", [("REFLECT", [[0, 0], [3, 1], [0, 2]]), ("SYMMETRIC", [[0, 0], [4, 2], [3, 0]]),
                                        ("REFLECT", [[0, 0], [1, 1], [1, 1]])])  # fmt: skip
def test_mirror_pad(mode, pads, rng):
    fn = lambda x: tf.pad(x, pads, mode)  # noqa: E731
    check_converter(fn, [spec(None, 4, 3)], feeds(rng, (1, 4, 3), (3, 4, 3)), "MirrorPad")


def refusal(fn, specs):
    """The Unsupported that to_relax raises for `fn`'s graph."""
    nodes, inputs, outputs, _ = tf_graph(fn, specs)
    with pytest.raises(Unsupported) as err:
        to_relax(nodes, inputs, outputs)
    return str(err.value)


W2 = np.ones((3, 3, 4, 3), F)


@pytest.mark.parametrize("fn, specs, reason", [
    (lambda x: tf.nn.conv2d_transpose(x, W2, [1, 4, 8, 8], 2, "SAME", data_format="NCHW"), [spec(1, 3, 4, 4)],
     "data_format NCHW"),
    (lambda x: tf.nn.conv2d_transpose(x, W2, [1, 6, 6, 4], 1, "SAME", dilations=2), [spec(1, 6, 6, 3)],
     "with dilations"),
    (lambda x: tf.nn.conv2d_transpose(x, W2, tf.stack([1, tf.shape(x)[1], 4, 4]), 1, "SAME"),
     [spec(1, None, 4, 3)], "output H, W, C must be static"),
    (lambda x: tf.nn.conv2d_transpose(x, W2, [1, 8, 8, 4], 2, "VALID"), [spec(1, 4, 4, 3)],
     "output size 8 does not give input size 4"),
    (lambda x: tf.nn.conv2d_transpose(x, W2, [1, 2, 2, 4], 1, [[0, 0], [3, 0], [3, 0], [0, 0]]),
     [spec(1, 3, 3, 3)], "past the filter size"),
    (lambda x: tf.nn.conv2d_transpose(x, W2, [1, 8, 8, 8], 2, "SAME"), [spec(1, 4, 4, 3)],
     "grouped Conv2DBackpropInput"),
    (lambda x: tf.nn.conv3d(x, tf.ones([1, 1, 1, 3, 2]), [1] * 5, "VALID", data_format="NCDHW"),
     [spec(1, 3, 2, 2, 2)], "Conv3D with data_format NCDHW"),
    (lambda x: tf.raw_ops.ResizeBilinear(images=x, size=[4, 4], align_corners=True, half_pixel_centers=True),
     [spec(1, 2, 2, 1)], "both align_corners and half_pixel_centers"),
    (lambda x: tf.raw_ops.ResizeNearestNeighbor(images=x, size=tf.shape(x)[1:3]), [spec(1, None, 2, 1)],
     "ResizeNearestNeighbor size must be static"),
    (lambda x: tf.space_to_batch_nd(x, [2, 2], [[0, 0], [0, 0]]), [spec(None, None, 4, 1)],
     "SpaceToBatchND needs static dims"),
    (lambda x: tf.nn.depth_to_space(x, 2, data_format="NCHW"), [spec(1, 8, 2, 2)], "data_format NCHW"),
    (lambda x: tf.nn.space_to_depth(x, 2), [spec(1, None, 4, 1)], "SpaceToDepth needs static dims"),
    (lambda x: tf.pad(x, [[1, 1], [0, 0]], "REFLECT"), [spec(None, 3)], "MirrorPad needs static dims"),
    (lambda x: tf.pad(x, [[0, 0], [5, 0]], "SYMMETRIC"), [spec(2, 4)], "MirrorPad SYMMETRIC of (5, 0) on a dim of 4"),
    (lambda x: tf.nn.conv3d(x, np.ones([1, 1, 1, 2, 2], F), [1] * 5, "VALID"), [spec(1, 2, 2, 2, 4)],
     "grouped Conv3D"),
], ids=["convT_nchw", "convT_dilated", "convT_symbolic_hw", "convT_bad_size", "convT_big_pad", "convT_grouped",
        "conv3d_ncdhw", "resize_both_flags", "resize_symbolic_size", "s2b_symbolic_spatial", "d2s_nchw",
        "s2d_symbolic", "mirror_pad_symbolic", "mirror_pad_too_wide", "conv3d_grouped"])  # fmt: skip
def test_refused_cases_say_why(fn, specs, reason):
    assert reason in refusal(fn, specs)


def test_keras_upsampling_decoder_runs_in_tvm(rng):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input(shape=(8, 8, 3)), keras.layers.Conv2DTranspose(4, 3, strides=2, padding="same"),
        keras.layers.UpSampling2D(interpolation="bilinear"), keras.layers.Conv2D(2, 3),
    ])  # fmt: skip
    fast = tftvm.optimize(model, input_signature=[tf.TensorSpec([None, 8, 8, 3])])
    for n in (1, 2):
        x = rng.standard_normal((n, 8, 8, 3)).astype(F)
        np.testing.assert_allclose(fast(x).numpy(), model(x).numpy(), rtol=1e-4, atol=1e-5)
    in_tf = {op.op for op in fast.summary().in_tf}
    assert not in_tf & {"Conv2DBackpropInput", "ResizeBilinear", "Conv2D"}, fast.report()
    assert "Conv2DBackpropInput x1" in fast.report() and "ResizeBilinear x1" in fast.report()
