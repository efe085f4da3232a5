"""A default CPU schedule so untuned kernels are not serial scalar loops.

Chains of elementwise blocks are first inlined into one loop (TVM's AutoInline rule), blocks
that only copy are inlined away, and the padding of a depthwise conv or a pool is read in
place (inline.py). Every other block goes to the first of
RULES that matches it (rule.py; one module per strategy in rules/):

1. RegisterTiles: a reduction over a static output axis that tiles, contiguous along it
   (matmul, conv, pooling): register tiles of up to 8 rows, written back once with the
   elementwise ops after them.
2. TransposedOperand: a large 2-D A·Bᵀ: B copied transposed, then register tiles.
3. DotProducts: a reduction along the inputs' contiguous last axis (a softmax's row max,
   a layer norm's mean, Q·Kᵀ): a vector of partial results per output (rfactor).
4. ColumnSums: a reduction over outer axes along contiguous columns (a bias gradient).
5. TiledTranspose: an elementwise block that reads an input across its rows.
6. ParallelLoops: the leading data-parallel loops in parallel, static inner loops vectorized
   (or, where they make no whole vectors, run as a serial row in each parallel iteration).

A block runs in parallel only where it is large enough to pay for waking TVM's threads
(analysis.PARALLEL_MIN_ITERATIONS). A step TVM refuses leaves that block as it was.
"""
from __future__ import annotations

import logging

from .analysis import BlockInfo, vector_lanes
from .inline import inline_copy, inline_elementwise, inline_padding
from .rules.column_sums import ColumnSums
from .rules.dot_products import DotProducts
from .rules.parallel_loops import ParallelLoops
from .rules.register_tiles import RegisterTiles, TransposedOperand, padded_columns, tile_width
from .rules.transpose import TiledTranspose

log = logging.getLogger(__name__)

RULES = (RegisterTiles(), TransposedOperand(), DotProducts(), ColumnSums(), TiledTranspose(), ParallelLoops())

__all__ = ["RULES", "custom_trace", "default_cpu_schedule", "default_cpu_trace", "padded_columns", "schedule_block",
           "tile_width", "vector_lanes"]


def default_cpu_schedule(mod):
    return default_cpu_trace(mod).mod


def custom_trace(mod, schedule_fn):
    """`schedule_fn(sch)` applied to the module's one PrimFunc, as a traced s_tir.Schedule."""
    from tvm import s_tir

    sch = s_tir.Schedule(mod)
    (gv,) = mod.get_global_vars()
    sch.work_on(gv.name_hint)
    try:
        schedule_fn(sch)
    except Exception as err:  # TVM raises its own error types for refused steps
        name = getattr(schedule_fn, "__name__", repr(schedule_fn))
        raise ValueError(f"schedule function {name} failed on '{gv.name_hint}': {err}") from err
    return sch


def default_cpu_trace(mod):
    """The default schedule as a traced s_tir.Schedule (tuning records it as a candidate)."""
    from tvm import s_tir

    sch = s_tir.Schedule(mod)
    for gv in mod.get_global_vars():
        sch.work_on(gv.name_hint)
        try:
            blocks = sch.get_child_blocks(sch.get_sblock("root"))
        except Exception:  # a PrimFunc written without blocks: nothing to schedule
            log.debug("'%s' has no root block; compiled as written", gv.name_hint)
            continue
        inline_elementwise(sch, blocks)
        for block in sch.get_child_blocks(sch.get_sblock("root")):
            trial = sch.copy()
            try:
                if not (inline_copy(trial, block) or inline_padding(trial, block)):
                    schedule_block(trial, block)
            except Exception as err:  # TVM raises its own error types for refused steps
                log.debug("default schedule left block as is: %s", err)
                continue
            sch = trial
    return sch


def schedule_block(sch, block, rules=RULES) -> str | None:
    """Schedule `block` by the first of `rules` that matches it; that rule's name, or None
    where the block is left as it is (no loops to schedule, or no rule matched)."""
    info = BlockInfo.of(sch, block)
    if info is None:
        return None
    for rule in rules:
        plan = rule.match(sch, block, info)
        if plan is not None:
            rule.apply(sch, block, info, plan, schedule_block)
            return rule.name
    return None
