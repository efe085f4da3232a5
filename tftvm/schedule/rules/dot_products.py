"""Reductions along contiguous memory that no register tile fits (a softmax's row max, a layer
norm's mean, Q·Kᵀ's dot products over the head dim): each output accumulates a vector of
partial results (rfactor), summed across its lanes once at the end."""
from __future__ import annotations

from ..analysis import one_reduction, uses
from ..rule import BlockRule

DOT_ACCUMULATORS = 25  # outputs of one task, one vector register each


class DotProducts(BlockRule):
    """The innermost reduction walks the last axis of every input that it indexes, with a
    static extent that a vector width divides (reduction_width)."""

    name = "dot products"

    def match(self, sch, block, info):
        return reduction_width(info.stmt, info.loops, info.spatial, info.lanes)

    def apply(self, sch, block, info, width, schedule_block) -> None:
        vectorize_reduction(sch, block, info.spatial, width, info.parallel)


def reduction_width(stmt, loops, spatial, lanes) -> int | None:
    """The vector width to split the innermost reduction by where it walks the last axis of
    every input that it indexes, else None. Each output ends with a sum across the lanes, one
    scalar add per lane, so the widest vector whose lanes are at most the square root of the
    extent, and a divisor of it."""
    from tvm import tirx

    if not one_reduction(stmt, loops, spatial):
        return None
    inner = stmt.iter_vars[-1]
    extent = inner.dom.extent
    if not isinstance(extent, tirx.IntImm):
        return None
    for read in stmt.reads:
        indices = [uses(r.min, inner.var) for r in read.region]
        if any(indices[:-1]) or (indices[-1] and not read.region[-1].min.same_as(inner.var)):
            return None
    return next((w for w in (lanes, lanes // 2, lanes // 4) if w >= 4 and int(extent) % w == 0
                 and w * w <= int(extent)), None)


def vectorize_reduction(sch, block, spatial, width, parallel) -> None:
    """Each output accumulates `width` partial results in one vector register. A task computes
    a block of neighbouring outputs together (dot_block: 5 queries x 5 keys of Q·Kᵀ over 30
    keys): their accumulators stay in registers, each step loads a vector of each row and
    column once for all of them, and the task's scratch buffer is allocated once."""
    stmt = sch.get(block)
    loops = sch.get_loops(block)
    _, lanes = sch.split(loops[-1], [None, width])
    partial = sch.rfactor(lanes, factor_axis=spatial)
    outputs = sch.get_loops(block)[:spatial]
    # Only an axis that some input does not depend on is blocked (the keys for the queries'
    # rows, and the reverse): blocking rows that share nothing (a layer norm's mean) is slower.
    sizes = [shared_extent(sch, stmt, loop, iv) for loop, iv in zip(outputs, stmt.iter_vars)][-2:]
    sizes = [1] * (2 - len(sizes)) + sizes
    outer, neighbours = list(outputs[:-2]), []
    for loop, factor in zip(outputs[-2:], dot_block(*sizes)[2 - len(outputs[-2:]) :]):
        if factor > 1:
            o, i = sch.split(loop, [None, factor])
            outer.append(o)
            neighbours.append(i)
        else:
            outer.append(loop)
    sch.reorder(*outer, *neighbours)
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    sch.compute_at(partial, fused)
    sch.set_scope(partial, 0, "local")
    depth = len(sch.get_loops(block)) - len(neighbours) - 1  # loops down to `fused`
    lane, *rest = sch.get_loops(partial)[depth:]  # in the order of the block's iter vars
    kept, reductions = rest[: len(neighbours)], rest[len(neighbours) :]
    sch.reorder(*reductions, *kept, lane)
    sch.vectorize(lane)  # annotations first: a reduction split from its init fails their checks
    for loop in kept:
        sch.unroll(loop)
    parallel(fused)
    init = sch.decompose_reduction(partial, reductions[0])
    sch.vectorize(sch.get_loops(init)[-1])


def shared_extent(sch, stmt, loop, iter_var) -> int:
    """The loop's static extent where some input of the block does not depend on its axis
    (a vector of that input serves every output along it), else 1."""
    from tvm import tirx

    extent = sch.get(loop).extent
    if not isinstance(extent, tirx.IntImm):
        return 1
    reused = any(not any(uses(r.min, iter_var.var) for r in read.region) for read in stmt.reads)
    return int(extent) if reused else 1


def dot_block(rows: int, cols: int) -> tuple[int, int]:
    """Outputs per task along the last two output axes (1 for a symbolic one): divisors of
    each (a prime up to DOT_ACCUMULATORS taken whole) with at most DOT_ACCUMULATORS outputs,
    the most outputs per vector loaded (r * c / (r + c)), then the most columns."""
    def divisors(n):
        return [d for d in range(1, min(n, DOT_ACCUMULATORS) + 1) if n % d == 0]

    pairs = [(r, c) for r in divisors(rows) for c in divisors(cols) if r * c <= DOT_ACCUMULATORS]
    return max(pairs, key=lambda rc: (rc[0] * rc[1] / (rc[0] + rc[1]), rc[1]))
