"""Converters for TF's neural-network ops: activations, bias, softmax, 2-D convolutions,
2-D and 3-D pooling (NHWC / NDHWC, TF's default layouts), local response normalization and
inference-mode batch norm."""
from __future__ import annotations

from tvm import relax

from ..helpers import libm, nhwc_only, static_dims, window_pads
from ..registry import Unsupported, register_converter


@register_converter("Relu6")
def _relu6(ctx, node, x):
    return relax.op.clip(x, 0, 6)  # NaNs pass: see lowering/nans.py


# Eigen's machine epsilon per float dtype, from which TF's softplus takes its thresholds.
_EPSILON = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}


@register_converter("Softplus")
def _softplus(ctx, node, x):
    """TF's formula (its softplus functor): x above -t, exp(x) below t, log1p(exp(x)) between,
    t = log(epsilon) + 2. log(1 + exp(x)) rounds 1 + exp(x) first, an ulp off TF's for
    x < 0, and a truncatemod by the result makes that ulp large (found by the graph fuzzer)."""
    import math

    from tvm import te, tirx

    dtype = ctx.attr(node, "T")
    if dtype not in _EPSILON:
        raise Unsupported(f"Softplus of {dtype}")
    t = math.log(_EPSILON[dtype]) + 2.0

    def element(v):
        e = tirx.exp(v)
        return tirx.Select(v > tirx.const(-t, dtype), v,
                           tirx.Select(v < tirx.const(t, dtype), e, libm("log1p", dtype, e)))  # fmt: skip

    return ctx.bb.call_te(lambda a: te.compute(a.shape, lambda *i: element(a[i]), name="softplus"), x)


@register_converter("Elu")
def _elu(ctx, node, x):
    # TF's select: x < 0 takes exp(x) - 1, so -0.0 (and NaN) pass on as they are.
    op = relax.op
    t = ctx.attr(node, "T")
    return op.where(op.less(x, relax.const(0, t)), op.subtract(op.exp(x), relax.const(1, t)), x)


@register_converter("Selu")
def _selu(ctx, node, x):
    # TF's select and constants: scale * alpha is one constant there, x < 0 picks the exp side.
    op = relax.op
    t = ctx.attr(node, "T")
    scale, scale_alpha = relax.const(1.0507009873554805, t), relax.const(1.7580993408473769, t)
    negative = op.multiply(scale_alpha, op.subtract(op.exp(x), relax.const(1, t)))
    return op.where(op.less(x, relax.const(0, t)), negative, op.multiply(scale, x))


@register_converter("BiasAdd", "BiasAddV1")
def _bias_add(ctx, node, x, bias):
    if ctx.attr(node, "data_format", "NHWC") == "NCHW":  # bias along axis 1
        bias = relax.op.reshape(bias, [bias.ty.shape[0]] + [1] * (len(x.ty.shape) - 2))
    return relax.op.add(x, bias)


@register_converter("Softmax")
def _softmax(ctx, node, x):
    return relax.op.nn.softmax(x, axis=-1)


@register_converter("LogSoftmax")
def _log_softmax(ctx, node, x):
    return relax.op.nn.log_softmax(x, axis=-1)


def _window_padding(ctx, node, x, window, strides, dilations):
    """Relax (top, left, bottom, right) padding of a 2-D window over NHWC `x`; SAME needs
    the static height and width."""
    same = ctx.attr(node, "padding") not in ("VALID", "EXPLICIT")
    sizes = static_dims(x, node.op, (1, 2))[1:3] if same else None
    (top, bottom), (left, right) = window_pads(ctx, node, sizes, window, strides, dilations)
    return (top, left, bottom, right)


@register_converter("Conv2D")
def _conv2d(ctx, node, x, w):
    nhwc_only(ctx, node)
    strides, dil = ctx.attr(node, "strides")[1:3], (ctx.attr(node, "dilations") or [1, 1, 1, 1])[1:3]
    kh, kw, cin, _ = static_dims(w, "Conv2D filter")
    groups = static_dims(x, "Conv2D", (3,))[3] // cin
    pad = _window_padding(ctx, node, x, (kh, kw), strides, dil)
    return relax.op.nn.conv2d(x, w, strides=strides, padding=pad, dilation=dil, groups=groups,
                                 data_layout="NHWC", kernel_layout="HWIO")  # fmt: skip


@register_converter("DepthwiseConv2dNative")
def _depthwise(ctx, node, x, w):
    nhwc_only(ctx, node)
    strides, dil = ctx.attr(node, "strides")[1:3], (ctx.attr(node, "dilations") or [1, 1, 1, 1])[1:3]
    kh, kw, c, m = static_dims(w, "depthwise filter")
    # TF's (H, W, C, M) filter is a grouped conv with C groups of M outputs each.
    w = relax.op.reshape(w, [kh, kw, 1, c * m])
    pad = _window_padding(ctx, node, x, (kh, kw), strides, dil)
    return relax.op.nn.conv2d(x, w, strides=strides, padding=pad, dilation=dil, groups=c,
                                 data_layout="NHWC", kernel_layout="HWIO")  # fmt: skip


def _pool(kind):
    def convert(ctx, node, x):
        nhwc_only(ctx, node)
        window, strides = ctx.attr(node, "ksize")[1:3], ctx.attr(node, "strides")[1:3]
        pad = _window_padding(ctx, node, x, window, strides, (1, 1))
        fn = getattr(relax.op.nn, kind)
        # TF averages over the window's valid elements only: count_include_pad=False.
        return fn(x, pool_size=window, strides=strides, padding=pad, layout="NHWC",
                  count_include_pad=False)  # fmt: skip

    return convert


register_converter("MaxPool")(_pool("max_pool2d"))
register_converter("AvgPool")(_pool("avg_pool2d"))


@register_converter("MaxPool3D", "AvgPool3D")
def _pool3d(ctx, node, x):
    if ctx.attr(node, "data_format", "NDHWC") != "NDHWC":
        raise Unsupported(f"{node.op} with data_format {ctx.attr(node, 'data_format')}")
    window, strides = ctx.attr(node, "ksize")[1:4], ctx.attr(node, "strides")[1:4]
    same = ctx.attr(node, "padding") != "VALID"
    sizes = static_dims(x, node.op, (1, 2, 3))[1:4] if same else None
    pads = window_pads(ctx, node, sizes, window, strides, (1, 1, 1))
    fn = relax.op.nn.max_pool3d if node.op == "MaxPool3D" else relax.op.nn.avg_pool3d
    return fn(x, pool_size=window, strides=strides, padding=[p[0] for p in pads] + [p[1] for p in pads],
              layout="NDHWC", count_include_pad=False)  # fmt: skip


@register_converter("LRN")
def _lrn(ctx, node, x):
    """TF's x / (bias + alpha * sum of squares over the 2r + 1 nearest channels) ** beta:
    TOPI's LRN over the last axis, whose alpha TOPI divides by the window's size."""
    from tvm import topi

    size = 2 * int(ctx.attr(node, "depth_radius", 5)) + 1
    alpha, beta, bias = (float(ctx.attr(node, k, d)) for k, d in (("alpha", 1.0), ("beta", 0.5), ("bias", 1.0)))
    if len(x.ty.shape) != 4:
        raise Unsupported(f"LRN of a rank-{len(x.ty.shape)} input (TF takes rank 4)")
    return ctx.bb.call_te(topi.nn.lrn, x, size, 3, alpha * size, beta, bias)


@register_converter("FusedBatchNormV3", "FusedBatchNorm")
def _fused_batch_norm(ctx, node, x, scale, offset, mean, variance, *rest):
    if ctx.attr(node, "is_training", True):
        raise Unsupported("FusedBatchNorm in training mode")
    nhwc_only(ctx, node)
    op = relax.op
    eps = relax.const(float(ctx.attr(node, "epsilon", 1e-3)), ctx.attr(node, "T"))
    inv = op.multiply(op.rsqrt(op.add(variance, eps)), scale)
    # x * inv + shift, as TF's own kernel computes it: a conv's x * inv then folds into its
    # weights (fold_scales), and the shift is computed from the statistics alone.
    return op.add(op.multiply(x, inv), op.subtract(offset, op.multiply(mean, inv)))


@register_converter("LeakyRelu")
def _leaky_relu(ctx, node, x):
    return relax.op.nn.leakyrelu(x, float(ctx.attr(node, "alpha", 0.2)))
