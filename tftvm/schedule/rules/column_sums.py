"""Reductions over outer axes along contiguous columns (a bias gradient: the sum of a
(batch, length, features) tensor over batch and length): each task owns a vector of
neighbouring outputs and streams every input row once, adding it with vector adds (walking
an output's column at the row stride is many times slower)."""
from __future__ import annotations

from ..analysis import one_reduction, uses
from ..rule import BlockRule


class ColumnSums(BlockRule):
    """The output's last axis walks the last axis of every input while the reduction runs
    over outer axes, with a static extent that a vector width divides (column_width)."""

    name = "column sums"

    def match(self, sch, block, info):
        return column_width(sch, info.stmt, info.loops, info.spatial, info.lanes)

    def apply(self, sch, block, info, width, schedule_block) -> None:
        vectorize_columns(sch, block, info.spatial, width, info.parallel)


def column_width(sch, stmt, loops, spatial, lanes) -> int | None:
    """The vector width of the output's last axis where a reduction runs over outer axes
    while that axis walks the last axis of every input, else None."""
    from tvm import tirx

    if not one_reduction(stmt, loops, spatial):
        return None
    column = stmt.iter_vars[spatial - 1]
    extent = sch.get(loops[spatial - 1]).extent
    if not isinstance(extent, tirx.IntImm):
        return None
    reductions = [iv.var for iv in stmt.iter_vars[spatial:]]
    for read in stmt.reads:
        last = read.region[-1].min
        if not last.same_as(column.var) or any(uses(last, r) for r in reductions):
            return None
        if any(uses(r.min, column.var) for r in read.region[:-1]):
            return None
    return next((w for w in (4 * lanes, 2 * lanes, lanes, lanes // 2, lanes // 4)
                 if w >= 4 and int(extent) % w == 0), None)


def vectorize_columns(sch, block, spatial, width, parallel) -> None:
    """Each task owns `width` neighbouring outputs, the reduction loops outside its lanes."""
    loops = sch.get_loops(block)
    outer, lanes = sch.split(loops[spatial - 1], [None, width])
    reductions = sch.get_loops(block)[spatial + 1 :]
    sch.reorder(*reductions, lanes)
    fused = sch.fuse(*sch.get_loops(block)[:spatial]) if spatial > 1 else outer
    sch.vectorize(lanes)  # annotations first: a reduction split from its init fails their checks
    parallel(fused)
    init = sch.decompose_reduction(block, reductions[0])
    sch.vectorize(sch.get_loops(init)[-1])
