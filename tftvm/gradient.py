"""Gradients of tftvm ops: one TF gradient function for TvmCall, dispatching per op.

TF looks gradients up by op type, and every tftvm op is a TvmCall node, so the
registered function finds the user's backward by the node's (key, op_name)
attrs. Registering costs nothing on the forward path: the eager fast path
records TvmCall on an active tape like any op with a gradient.
"""
from __future__ import annotations

import threading
from typing import Callable

import tensorflow as tf

_lock = threading.Lock()
_backward: dict[tuple[str, str], Callable] = {}


def register(key: str, op_name: str, grad: Callable) -> None:
    if not callable(grad):
        raise TypeError(f"grad= for tftvm op '{op_name}' must be callable, got {type(grad).__name__}")
    with _lock:
        _backward[(key, op_name)] = grad


@tf.RegisterGradient("TvmCall")
def _tvm_call_grad(op, *upstream):
    key, op_name = op.get_attr("key"), op.get_attr("op_name")
    key = key.decode() if isinstance(key, bytes) else key
    op_name = op_name.decode() if isinstance(op_name, bytes) else op_name
    with _lock:
        grad = _backward.get((key, op_name))
    if grad is None:
        raise LookupError(
            f"tftvm op '{op_name}' has no gradient: pass grad= to tftvm.op() to differentiate it"
        )
    inputs, outputs = list(op.inputs), list(op.outputs)
    # Outputs that do not reach the loss get None from TF; the backward sees zeros.
    upstream = [tf.zeros_like(y) if g is None else g for g, y in zip(upstream, outputs)]
    result = grad(*inputs, *outputs, *upstream)
    result = list(result) if isinstance(result, (list, tuple)) else [result]
    differentiable = [i for i, x in enumerate(inputs) if x.dtype.is_floating or x.dtype.is_complex]
    if len(result) != len(differentiable):
        raise ValueError(
            f"the grad of tftvm op '{op_name}' returned {len(result)} gradients; it must return one "
            f"per floating-point input ({len(differentiable)})"
        )
    grads: list = [None] * len(inputs)
    for i, g in zip(differentiable, result):
        grads[i] = None if g is None else tf.convert_to_tensor(g, dtype=inputs[i].dtype)
    return grads
