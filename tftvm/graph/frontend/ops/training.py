"""Converters for the ops TF's gradients emit: a training step's backward pass (under
`tftvm.enable()`, Keras `fit`) joins the forward pass in TVM instead of cutting it into
clusters with TF between them. Each is TF's own formula for the op; the two operands of
the gradient ops have one shape, so their symbolic dims are made the same (broadcast=True)."""
from __future__ import annotations

from tvm import relax

from ..registry import register_converter


def _one(ctx, node):
    return relax.const(1, ctx.attr(node, "T"))


@register_converter("SigmoidGrad", broadcast=True)
def _sigmoid_grad(ctx, node, y, dy):
    op = relax.op  # dy * y * (1 - y), y being sigmoid(x)
    return op.multiply(dy, op.multiply(y, op.subtract(_one(ctx, node), y)))


@register_converter("TanhGrad", broadcast=True)
def _tanh_grad(ctx, node, y, dy):
    op = relax.op  # dy * (1 - y^2), y being tanh(x)
    return op.multiply(dy, op.subtract(_one(ctx, node), op.multiply(y, y)))


# TF multiplies by the mask (a NaN gradient stays NaN where the unit is off), so do these.
@register_converter("ReluGrad", broadcast=True)
def _relu_grad(ctx, node, gradients, features):
    op, t = relax.op, ctx.attr(node, "T")
    return op.multiply(gradients, op.astype(op.greater(features, relax.const(0, t)), t))


@register_converter("Relu6Grad", broadcast=True)
def _relu6_grad(ctx, node, gradients, features):
    op = relax.op
    t = ctx.attr(node, "T")
    inside = op.logical_and(op.greater(features, relax.const(0, t)), op.less(features, relax.const(6, t)))
    return op.multiply(gradients, op.astype(inside, t))


@register_converter("RsqrtGrad", broadcast=True)
def _rsqrt_grad(ctx, node, y, dy):
    op = relax.op  # dy * -0.5 * y^3, y being rsqrt(x)
    return op.multiply(dy, op.multiply(relax.const(-0.5, ctx.attr(node, "T")), op.multiply(y, op.multiply(y, y))))


@register_converter("SqrtGrad", broadcast=True)
def _sqrt_grad(ctx, node, y, dy):
    op = relax.op  # dy * 0.5 / y, y being sqrt(x)
    return op.divide(op.multiply(dy, relax.const(0.5, ctx.attr(node, "T"))), y)


@register_converter("BiasAddGrad")
def _bias_add_grad(ctx, node, out_backprop):
    rank = len(out_backprop.ty.shape)
    channel = 1 if ctx.attr(node, "data_format", "NHWC") == "NCHW" else rank - 1
    return relax.op.sum(out_backprop, axis=[a for a in range(rank) if a != channel])


@register_converter("DivNoNan", broadcast=True)
def _div_no_nan(ctx, node, x, y):
    op = relax.op  # x / y, and 0 where y is 0 (whatever x is)
    zero = relax.const(0, ctx.attr(node, "T"))
    is_zero = op.equal(y, zero)
    quotient = op.divide(x, op.where(is_zero, relax.const(1, ctx.attr(node, "T")), y))
    return op.where(is_zero, op.zeros_like(quotient), quotient)
