"""The part of a graph that computes some of its tensors from others, as a graph of its own."""
from __future__ import annotations

from .functions import prune_library
from .names import drop_dangling_colocation, tensor_name


def cut_out(graph, graph_def, feeds: list[str], fetches: list[str]):
    """(GraphDef, placeholder names): the nodes of `graph_def` that `fetches` need when the
    tensors `feeds` are given, each feed a Placeholder of its own (one name per item of
    `feeds`; a fetch that is fed is that Placeholder), and the library functions they call.

    What lies before the feeds is left out, so the result carries only the constants the
    fetches need: importing a whole frozen graph to run one node of it copies all of a
    model's weights (a decoder's loop node in compile_model). `graph` (the tf.Graph of
    `graph_def`) gives the feeds' dtypes and shapes."""
    import tensorflow as tf

    by_name = {n.name: n for n in graph_def.node}
    fed = {tensor_name(f): f"tftvm_feed_{i}" for i, f in enumerate(feeds)}
    needed, pending = {}, [f.split(":")[0] for f in fetches if tensor_name(f) not in fed]
    while pending:
        name = pending.pop()
        if name in needed:
            continue
        needed[name] = by_name[name]
        for i in needed[name].input:
            if i.startswith("^") or tensor_name(i) not in fed:
                pending.append(i.lstrip("^").split(":")[0])
    out = tf.compat.v1.GraphDef(versions=graph_def.versions)
    for feed, placeholder in fed.items():
        tensor = graph.get_tensor_by_name(feed)
        node = out.node.add(name=placeholder, op="Placeholder")
        node.attr["dtype"].type = tensor.dtype.as_datatype_enum
        node.attr["shape"].shape.CopyFrom(tensor.shape.as_proto())
    for node in needed.values():
        copy = out.node.add()
        copy.CopyFrom(node)
        inputs = [i if i.startswith("^") or tensor_name(i) not in fed else fed[tensor_name(i)] + ":0"
                  for i in node.input]  # fmt: skip
        del copy.input[:]
        copy.input.extend(inputs)
    out.library.CopyFrom(graph_def.library)
    prune_library(out)
    drop_dangling_colocation(out)
    return out, [fed[tensor_name(f)] for f in feeds]
