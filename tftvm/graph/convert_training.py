"""Converters for the ops TF's gradients emit: a training step's backward pass (under
`tftvm.enable()`, Keras `fit`) joins the forward pass in TVM instead of cutting it into
clusters with TF between them. Each is TF's own formula for the op."""
from __future__ import annotations

from .convert import _relax, converts, same_dims


def _one(ctx, node):
    return _relax().const(1, ctx.attr(node, "T"))


@converts("SigmoidGrad")
def _sigmoid_grad(ctx, node, y, dy):
    y, dy = same_dims(ctx, [y, dy])  # one tensor's shape: the same symbolic dims
    op = _relax().op  # dy * y * (1 - y), y being sigmoid(x)
    return op.multiply(dy, op.multiply(y, op.subtract(_one(ctx, node), y)))


@converts("TanhGrad")
def _tanh_grad(ctx, node, y, dy):
    y, dy = same_dims(ctx, [y, dy])  # one tensor's shape: the same symbolic dims
    op = _relax().op  # dy * (1 - y^2), y being tanh(x)
    return op.multiply(dy, op.subtract(_one(ctx, node), op.multiply(y, y)))


# TF multiplies by the mask (a NaN gradient stays NaN where the unit is off), so do these.
@converts("ReluGrad")
def _relu_grad(ctx, node, gradients, features):
    gradients, features = same_dims(ctx, [gradients, features])  # one tensor's shape: the same symbolic dims
    op, t = _relax().op, ctx.attr(node, "T")
    return op.multiply(gradients, op.astype(op.greater(features, _relax().const(0, t)), t))


@converts("Relu6Grad")
def _relu6_grad(ctx, node, gradients, features):
    gradients, features = same_dims(ctx, [gradients, features])  # one tensor's shape: the same symbolic dims
    op, relax = _relax().op, _relax()
    t = ctx.attr(node, "T")
    inside = op.logical_and(op.greater(features, relax.const(0, t)), op.less(features, relax.const(6, t)))
    return op.multiply(gradients, op.astype(inside, t))


@converts("RsqrtGrad")
def _rsqrt_grad(ctx, node, y, dy):
    y, dy = same_dims(ctx, [y, dy])  # one tensor's shape: the same symbolic dims
    op, relax = _relax().op, _relax()  # dy * -0.5 * y^3, y being rsqrt(x)
    return op.multiply(dy, op.multiply(relax.const(-0.5, ctx.attr(node, "T")), op.multiply(y, op.multiply(y, y))))


@converts("SqrtGrad")
def _sqrt_grad(ctx, node, y, dy):
    y, dy = same_dims(ctx, [y, dy])  # one tensor's shape: the same symbolic dims
    op, relax = _relax().op, _relax()  # dy * 0.5 / y, y being sqrt(x)
    return op.divide(op.multiply(dy, relax.const(0.5, ctx.attr(node, "T"))), y)


@converts("BiasAddGrad")
def _bias_add_grad(ctx, node, out_backprop):
    rank = len(out_backprop.ty.shape)
    channel = 1 if ctx.attr(node, "data_format", "NHWC") == "NCHW" else rank - 1
    return _relax().op.sum(out_backprop, axis=[a for a in range(rank) if a != channel])


@converts("DivNoNan")
def _div_no_nan(ctx, node, x, y):
    op, relax = _relax().op, _relax()  # x / y, and 0 where y is 0 (whatever x is)
    x, y = same_dims(ctx, [x, y])
    zero = relax.const(0, ctx.attr(node, "T"))
    is_zero = op.equal(y, zero)
    quotient = op.divide(x, op.where(is_zero, relax.const(1, ctx.attr(node, "T")), y))
    return op.where(is_zero, op.zeros_like(quotient), quotient)
