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


def drop_dangling_colocation(graph_def) -> None:
    """Colocation constraints (`_class: loc:@node`) naming a node `graph_def` does not hold
    dropped: the import of a graph whose node names a node it does not hold fails (TF1
    colocates a cond's input with the Switch that functionalizing takes away; a graph cut
    out of a bigger one leaves nodes behind)."""
    names = {n.name for n in graph_def.node}
    for node in graph_def.node:
        if "_class" not in node.attr:
            continue
        kept = [c for c in node.attr["_class"].list.s if not c.startswith(b"loc:@") or c[5:].decode() in names]
        if kept:
            del node.attr["_class"].list.s[:]
            node.attr["_class"].list.s.extend(kept)
        else:
            del node.attr["_class"]
