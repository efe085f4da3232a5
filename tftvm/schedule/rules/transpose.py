"""Transposes in tiles: an elementwise block that reads an input across its rows, and the
transposed copy of a matmul operand (register_tiles.TransposedOperand)."""
from __future__ import annotations

from ..analysis import static_rows, uses
from ..rule import BlockRule

PARALLEL_MIN_COPY = 1 << 18  # elements (1 MB of float32): below, a thread's launch costs more


class TiledTranspose(BlockRule):
    """An elementwise block whose output's last axis walks an outer axis of some input (a
    transpose), both extents static multiples of a vector: tiles of lanes x lanes, so that a
    tile's rows of the input are read while they are in cache and each output row is written
    as one vector (untiled, each vector was gathered from `lanes` rows a row apart)."""

    name = "tiled transpose"

    def match(self, sch, block, info):
        if info.spatial != len(info.loops):
            return None
        return transposed_axis(sch, info.stmt, info.loops, info.lanes)

    def apply(self, sch, block, info, across, schedule_block) -> None:
        tile_transpose(sch, block, across, info.lanes, info.parallel)


def transposed_axis(sch, stmt, loops, lanes) -> int | None:
    """Where an elementwise block reads some input across its rows (a transpose: the output's
    last axis walks an outer axis of that input), the index of the output loop that walks the
    input's last axis; None otherwise, or where either extent is not a static multiple of
    `lanes`."""
    from tvm import tirx

    if len(loops) < 2 or len(stmt.writes) != 1:
        return None
    column = stmt.iter_vars[-1].var
    for read in stmt.reads:
        last = read.region[-1].min
        if uses(last, column) or not any(uses(r.min, column) for r in read.region[:-1]):
            continue
        across = next((i for i, iv in enumerate(stmt.iter_vars[:-1]) if last.same_as(iv.var)), None)
        if across is None:
            continue
        extents = [sch.get(loops[i]).extent for i in (across, len(loops) - 1)]
        if all(isinstance(e, tirx.IntImm) and int(e) % lanes == 0 for e in extents):
            return across
    return None


def tile_transpose(sch, block, across: int, lanes: int, parallel) -> None:
    """Tiles of `lanes` x `lanes`, the columns of a tile one vector."""
    loops = sch.get_loops(block)
    rows_outer, rows = sch.split(loops[across], [None, lanes])
    columns_outer, columns = sch.split(loops[-1], [None, lanes])
    outer = [loop for i, loop in enumerate(loops[:-1]) if i != across]
    sch.reorder(*outer, rows_outer, columns_outer, rows, columns)
    sch.vectorize(columns)
    parallel(sch.fuse(*outer, rows_outer, columns_outer))


def transpose_copy(sch, copy, column_axis: int, lanes: int, schedule_block) -> None:
    """The copy of a matmul's B with its column axis (`column_axis`, j) moved last, in tiles,
    in parallel from PARALLEL_MIN_COPY elements: the copy block iterates B's axes, so
    scheduled as an elementwise block each vector of it would be stored a row apart, on one
    thread. A copy whose j and k extents are not whole vectors goes through the rules."""
    from tvm import tirx

    loops = sch.get_loops(copy)  # B's axes, its reduction axis k last
    extents = [sch.get(loop).extent for loop in loops]
    if not all(isinstance(extents[axis], tirx.IntImm) and int(extents[axis]) % lanes == 0
               for axis in (column_axis, len(loops) - 1)):
        schedule_block(sch, copy)
        return
    # The copy's own axes, in the order it writes them: its rows (B's columns) outside.
    sch.reorder(*(loop for axis, loop in enumerate(loops) if axis != column_axis), loops[column_axis])
    large = static_rows(sch, loops) >= PARALLEL_MIN_COPY
    tile_transpose(sch, copy, len(loops) - 2, lanes, sch.parallel if large else lambda loop: None)
