"""Tensor and node names as a GraphDef writes them, and a node's inputs read from them.

A NodeDef names its inputs "node" (output 0), "node:i" or "^node" (a control input);
tensors are "node:i". These helpers are the one place that spells that rule.
"""
from __future__ import annotations


def tensor_name(name: str) -> str:
    """"node" -> "node:0"; "node:i" unchanged."""
    return name if ":" in name else name + ":0"


def tensor_inputs(node) -> list[str]:
    """The tensors `node` reads (its data inputs, control inputs left out)."""
    return [tensor_name(i) for i in node.input if not i.startswith("^")]


def without_control_inputs(node):
    """A copy of `node` with its control inputs dropped (a node imported on its own, whose
    control dependencies the caller re-creates or does not need)."""
    import tensorflow as tf

    copy = tf.compat.v1.NodeDef()
    copy.CopyFrom(node)
    del copy.input[:]
    copy.input.extend(i for i in node.input if not i.startswith("^"))
    return copy
