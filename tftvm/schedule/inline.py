"""Steps before the block rules: elementwise chains inlined into one loop, copies away, and
the padding stage of a depthwise conv or a pool read in place."""
from __future__ import annotations

import logging

from .analysis import is_spatial, uses

log = logging.getLogger(__name__)


def inline_elementwise(sch, blocks) -> None:
    """Inline each elementwise block into its consumers where they are all elementwise too
    (TVM's AutoInline rule decides what may go): a chain such as GELU's six ops then runs as one
    loop in one pass over memory. Never into a reduction, which would compute the block again
    for every reuse of its output; nor a reduction's only consumer (a conv's ReLU6 before a
    pad), which register tiles apply as each tile is written back. A swish after a conv reads
    the conv twice: inlined, it becomes the conv's only consumer, and so its epilogue."""
    from tvm.s_tir import meta_schedule as ms

    rule = ms.schedule_rule.AutoInline(into_producer=False, into_consumer=True, inline_const_tensor=True,
                                       disallow_if_then_else=True, require_injective=True, require_ordered=True,
                                       disallow_op=None)  # fmt: skip
    for block in blocks:
        consumers = sch.get_consumers(block)
        if not consumers or not all(is_spatial(sch.get(b)) for b in [block, *consumers]):
            continue
        reductions = [p for p in sch.get_producers(block) if not is_spatial(sch.get(p))]
        if any(len(sch.get_consumers(p)) == 1 for p in reductions):
            continue  # the epilogue of a reduction that has no other consumer
        try:
            rule.apply(sch, block)  # inlines in place, or leaves the block as it is
        except Exception as err:  # TVM raises its own error types for refused steps
            log.debug("block not inlined: %s", err)


def inline_copy(sch, block) -> bool:
    """Inline a block that only copies (a conv's padding stage where there is no padding):
    a pass over memory saved. False where it is no copy or TVM refuses (it writes an output)."""
    from tvm.ir.expr import TensorLoad  # what tirx.BufferLoad makes
    from tvm.tirx.stmt import BufferStore

    body = sch.get(block).body
    if not (isinstance(body, BufferStore) and isinstance(body.value, TensorLoad)):
        return False
    return _compute_inline(sch, block, "copy")


def inline_padding(sch, block) -> bool:
    """Inline a padding stage (`if_then_else(inside, x[...], fill)`) into consumers that reduce
    over a window only, channel by channel (a depthwise conv, a pool: the padded input read at
    the output's own channel): each input element is read by a few taps, so a pass that writes
    the padded copy (on one thread) costs more than the bounds test in the taps. Not into a
    conv that reduces over input channels, whose taps would test the bounds once per channel.
    False where the block is no padding or TVM refuses."""
    from tvm.tirx.stmt import BufferStore

    stmt = sch.get(block)
    body = stmt.body
    if not (is_spatial(stmt) and len(stmt.writes) == 1 and isinstance(body, BufferStore)
            and _is_if_then_else(body.value)):
        return False
    consumers = sch.get_consumers(block)
    if not consumers or not all(_reads_channel_by_channel(sch.get(c), stmt.writes[0].source) for c in consumers):
        return False
    return _compute_inline(sch, block, "padding")


def _compute_inline(sch, block, what: str) -> bool:
    try:
        sch.compute_inline(block)
    except Exception as err:  # TVM raises its own error types for refused steps
        log.debug("%s not inlined: %s", what, err)
        return False
    return True


def _is_if_then_else(value) -> bool:
    op = getattr(value, "op", None)
    return str(getattr(op, "name", "")).endswith("if_then_else")


def _reads_channel_by_channel(stmt, buffer) -> bool:
    """A reduction that reads `buffer`'s last axis at its own last output axis (a channel)."""
    if is_spatial(stmt):
        return False
    spatial = [iv for iv in stmt.iter_vars if int(iv.iter_type) == 0]  # 0: data parallel
    reads = [r for r in stmt.reads if r.source.same_as(buffer)]
    return bool(spatial and reads) and all(uses(r.region[-1].min, spatial[-1].var) for r in reads)
