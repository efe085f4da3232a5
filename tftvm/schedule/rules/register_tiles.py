"""Matmul-like blocks (matmul, conv, pooling) in register tiles: each parallel task
accumulates a tile of up to TILE_ROWS rows by one or two vectors of columns in registers and
writes it back once, the elementwise ops after it (bias, ReLU, a folded batch norm) applied
as it is written. A symbolic row count (a Dense layer's batch) and a column count that no tile
width divides (30 keys, 10 classes) are padded to whole tiles, so that no tile needs a bounds
check. A·Bᵀ with a large B (a dense layer's input gradient, dY·Wᵀ) copies B transposed once
per call and then runs as A·B."""
from __future__ import annotations

import logging

from ..analysis import columns_contiguous, input_reads, one_reduction, static_rows, uses
from ..rule import BlockRule
from ..vectorize import vectorize_by_registers
from .transpose import transpose_copy

log = logging.getLogger(__name__)

TILE_ROWS = 8  # a register tile of up to 8 rows (tile_height) x 2 or 3 vectors of accumulators (tile_width)
ACCUMULATOR_REGISTERS = 28  # of AVX-512's 32 vector registers; the rest hold a weight vector and inputs
TRANSPOSE_MIN_OUTPUTS = 1 << 16  # 256 x 256: below, the copy costs more than dot products lose


class RegisterTiles(BlockRule):
    """A reduction over a static last output axis that tiles (tileable_reduction), where that
    axis walks the last axis of every input it indexes (B of A·B, a conv's weights)."""

    name = "register tiles"

    def match(self, sch, block, info):
        tiles = tileable_reduction(sch, info.stmt, info.loops, info.spatial, info.lanes)
        return True if tiles and columns_contiguous(info.stmt, info.spatial) else None

    def apply(self, sch, block, info, plan, schedule_block) -> None:
        loops = rows_b_does_not_index(sch, block, info.stmt, info.loops, info.spatial)
        tile_reduction(sch, block, loops, info.spatial, info.lanes, info.parallel, schedule_block)


def rows_b_does_not_index(sch, block, stmt, loops, spatial) -> list:
    """The block's loops, with a static output axis that the column operands (B) do not index
    moved next to the columns where the axis there is one they do, or of one: the rows of a
    tile then share B's vectors. Attention's probs·V, einsum("acbe,aecd->abcd"), writes
    [batch, queries, heads, depth]; its heads index V, so tiles over the heads would load a
    new vector of V for every row, and its tiles run over the queries instead. A decode
    step's [batch, 1 token, K]·W has rows of one: tiles of one row would each read their whole
    block of W for a single row (eight times the weights at a batch of 8), and its tiles run
    over the batch instead (an axis of more than one). Only static axes move (pad_einsum pads
    the block's own axis order)."""
    from tvm import tirx

    iter_vars = [iv.var for iv in stmt.iter_vars]
    column = iter_vars[spatial - 1]
    b_regions = [read.region for read in input_reads(stmt) if any(uses(r.min, column) for r in read.region)]

    def indexed_by_b(var) -> bool:
        return any(uses(r.min, var) for region in b_regions for r in region)

    def extent(loop) -> int | None:  # None where symbolic
        value = sch.get(loop).extent
        return int(value) if isinstance(value, tirx.IntImm) else None

    rows = extent(loops[spatial - 2])
    if rows is None or not (rows == 1 or indexed_by_b(iter_vars[spatial - 2])):
        return loops
    for axis in range(spatial - 3, -1, -1):
        size = extent(loops[axis])
        if not indexed_by_b(iter_vars[axis]) and size is not None and (rows > 1 or size > 1):
            others = [loop for i, loop in enumerate(loops[: spatial - 1]) if i != axis]
            sch.reorder(*others, loops[axis], loops[spatial - 1])
            return sch.get_loops(block)
    return loops


class TransposedOperand(BlockRule):
    """A tileable A·Bᵀ with static rows, columns and reduction, at least TRANSPOSE_MIN_OUTPUTS
    outputs over its static axes and a reduction of at least a tile's rows: B copied with its
    column axis last (in tiles, transpose.py), then register tiles as for A·B. Leading batch
    axes (attention's Q·Kᵀ over batch and heads) take their part of B each; the copy costs
    one pass over B against `rows` passes of the product."""

    name = "transposed operand"

    def match(self, sch, block, info):
        if not tileable_reduction(sch, info.stmt, info.loops, info.spatial, info.lanes):
            return None
        return transposed_operand(sch, info.stmt, info.loops, info.spatial)

    def apply(self, sch, block, info, plan, schedule_block) -> None:
        b, column_axis = plan
        copy = sch.cache_read(block, b, "global")
        sch.transform_layout(copy, ("write", 0), lambda *index: (*index[:column_axis], *index[column_axis + 1:],
                                                                 index[column_axis]))
        transpose_copy(sch, copy, column_axis, info.lanes, schedule_block)
        tile_reduction(sch, block, sch.get_loops(block), info.spatial, info.lanes, info.parallel, schedule_block)


def tileable_reduction(sch, stmt, loops, spatial, lanes) -> bool:
    """Spatial loops then reductions, the last spatial extent static: a multiple of a tile
    width, or from 4 to two vectors (padded to tiles, or taken as one tile)."""
    from tvm import tirx

    if spatial < 2 or not one_reduction(stmt, loops, spatial):
        return False
    cols = sch.get(loops[spatial - 1]).extent
    return isinstance(cols, tirx.IntImm) and (tile_width(int(cols), lanes) is not None or 4 <= int(cols) <= 2 * lanes)


def transposed_operand(sch, stmt, loops, spatial) -> tuple[int, int] | None:
    """For C[..., i, j] = sum_k A[..., i, k] B[..., j, ..., k] (every index of B a loop variable,
    none of them i) with static i, j and k, at least TRANSPOSE_MIN_OUTPUTS outputs over the
    static axes and a reduction of at least a tile's rows: the index of B among the block's
    reads and the axis of B that j walks; else None."""
    from tvm import tirx

    if len(loops) != spatial + 1 or len(stmt.iter_vars) != spatial + 1:
        return None
    extents = [sch.get(loop).extent for loop in loops]
    if not all(isinstance(e, tirx.IntImm) for e in extents[spatial - 2:]):
        return None
    depth = int(extents[spatial])
    if static_rows(sch, loops[:spatial]) < TRANSPOSE_MIN_OUTPUTS or depth < TILE_ROWS:
        return None
    i, j, k = (iv.var for iv in stmt.iter_vars[spatial - 2:])
    loop_vars = [iv.var for iv in stmt.iter_vars]
    for index, read in enumerate(stmt.reads):
        region = [r.min for r in read.region]
        if len(region) < 2 or not region[-1].same_as(k) or any(m.same_as(i) for m in region):
            continue
        if not all(any(m.same_as(v) for v in loop_vars) for m in region):
            continue
        column_axis = next((axis for axis, m in enumerate(region[:-1]) if m.same_as(j)), None)
        if column_axis is not None:
            return index, column_axis
    return None


def padded_columns(cols: int, lanes: int) -> int | None:
    """A column count that no tile width divides, padded for the widest tile that adds at most
    a quarter more columns (30 -> 32, 17 -> 20, 10 -> 12); None where none does (5 -> 8)."""
    for width in (2 * lanes, lanes, lanes // 2, lanes // 4):
        padded = -(-cols // width) * width
        if width >= 4 and 4 * padded <= 5 * cols:
            return padded
    return None


def tile_width(cols: int, lanes: int) -> int | None:
    """Columns per register tile: two vectors, three (144 channels: 8 x 3 accumulators, where
    tiles of one vector have 8, too few to cover the FMA units' latency), one, or a half or
    quarter vector where the column count is no multiple of a vector (Xception's 728
    channels, NASNet's 88): tiles of whole vectors of a narrower width beat fewer, taller
    tiles of odd widths."""
    for width in (2 * lanes, 3 * lanes, lanes, lanes // 2, lanes // 4):
        if width >= 4 and cols % width == 0:
            return width
    return None


def tile_reduction(sch, block, loops, spatial, lanes, parallel, schedule_block) -> None:
    """Parallel over output tiles, each tile accumulated in registers (vectorized along the
    last output axis) and written back once."""
    from tvm import tirx

    rows = sch.get(loops[spatial - 2]).extent
    cols = int(sch.get(loops[spatial - 1]).extent)
    padded_cols = cols if tile_width(cols, lanes) else padded_columns(cols, lanes) or cols
    pad_rows = not isinstance(rows, tirx.IntImm) and rows_share_an_operand(sch.get(block), spatial)
    row_factor = TILE_ROWS if pad_rows else 1
    copies = []
    if padded_cols != cols or row_factor > 1:
        copies = pad(sch, block, spatial, len(loops), row_factor, padded_cols if padded_cols != cols else 1)
        if copies is None:  # no einsum (a conv or pool): rows and columns as they are
            padded_cols = cols
    # Columns that no tile width divides and that cannot be padded (a conv of NASNetMobile's 11
    # or 22 channels) take one tile of them all, an odd-sized vector that LLVM splits, rather
    # than scalar code.
    width = tile_width(padded_cols, lanes) or padded_cols
    if isinstance(rows, tirx.IntImm):
        height = min(int(rows), tile_height(int(rows), most_rows(width, lanes)))
    else:  # padded to whole tiles: a batch of 1 pays for a tile's rows
        height = TILE_ROWS if pad_rows and copies is not None else 1  # unpadded: tiles of one row
    loops = sch.get_loops(block)
    batch, rows_loop, cols_loop, reductions = loops[: spatial - 2], *loops[spatial - 2 : spatial], loops[spatial:]
    columns_first = isinstance(rows, tirx.IntImm) and (
        int(sch.get(cols_loop).extent) > static_rows(sch, [*batch, rows_loop]))
    jo, ji = sch.split(cols_loop, [None, width])
    if height > 1:
        # A static row count that no height divides (a 19x19 image) gets its last tile cut
        # short: a bounds check in every step, which halves the speed. Fusing a conv's h and w
        # into one row axis would avoid it, but TVM 0.27 then writes tiles that straddle two
        # image rows back to the wrong row, and loop_partition's parts lose the write-back region.
        io, ii = sch.split(rows_loop, [None, height])
        outer, inner = [*batch, io, jo], [ii, ji]
    else:
        outer, inner = [*batch, rows_loop, jo], [ji]
    if columns_first:
        # More output columns than rows (a late conv: 7x7 pixels, 512 channels): a task's slice
        # of the weights outweighs its inputs, so the tiles are walked column block by column
        # block, and that slice stays in cache for every row tile. A symbolic batch stays outermost.
        rest = outer[:-1]
        leading = [loop for loop in rest if not isinstance(sch.get(loop).extent, tirx.IntImm)]
        outer = [*leading, jo, *(loop for loop in rest if loop not in leading)]
    sch.reorder(*outer, *reductions, *inner)
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    write_back = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(write_back, fused)
    # Padded rows are written back into the padded buffer, then copied out: the epilogue
    # goes into that copy (a bounds check on each written row would cost more).
    inline_epilogue(sch, sch.get_consumers(write_back)[0] if copies else write_back)
    vectorize_by_registers(sch, sch.get_loops(write_back)[-1], lanes)
    parallel(fused)
    if len(inner) == 2:
        sch.unroll(inner[0])
    vectorize_by_registers(sch, ji, lanes)
    # Annotations first: a reduction split from its init no longer passes their checks.
    init = sch.decompose_reduction(block, reductions[0])
    vectorize_by_registers(sch, sch.get_loops(init)[-1], lanes)
    for name in copies or ():  # the padding copies that are still there (not inlined above)
        try:
            copy = sch.get_sblock(name)
        except Exception:  # TVM raises its own error types for a missing block
            continue
        schedule_block(sch, copy)


def rows_share_an_operand(stmt, spatial) -> bool:
    """Whether an input is read the same by every row (B of A·B, a conv's weights): only
    then does a tile of several rows save loads. A global average pool over a symbolic batch,
    mean(x[n, h, w, c]) over h and w, has none: padding its batch of 1 to a tile's 8 rows
    would copy and sum 8 images."""
    row = stmt.iter_vars[spatial - 2].var
    return any(not any(uses(r.min, row) for r in read.region) for read in input_reads(stmt))


def inline_epilogue(sch, write_back) -> None:
    """Apply the elementwise ops after the reduction (bias add, ReLU, a folded batch norm)
    as each tile is written back, not in passes over the whole output."""
    while len(consumers := sch.get_consumers(write_back)) == 1:
        try:
            sch.reverse_compute_inline(consumers[0])
        except Exception as err:  # TVM raises its own error types for refused steps
            log.debug("epilogue not inlined: %s", err)
            return


def pad(sch, block, spatial, num_loops, row_factor, col_factor) -> list | None:
    """Pad a symbolic row count to whole tiles (`row_factor`), and a column count that no tile
    width divides to `col_factor`: the operands are copied into padded buffers and the result
    out (pad_einsum), so that no tile needs a bounds check. The new copy blocks' names, or None
    where the block is no einsum (a conv's symbolic width)."""
    root = sch.get_sblock("root")
    before = {sch.get(b).name_hint for b in sch.get_child_blocks(root)}
    try:
        sch.pad_einsum(block, [1] * (spatial - 2) + [row_factor, col_factor] + [1] * (num_loops - spatial))
    except Exception as err:  # TVM raises its own error types for refused steps
        log.debug("symbolic rows not padded: %s", err)
        return None
    return [sch.get(b).name_hint for b in sch.get_child_blocks(root) if sch.get(b).name_hint not in before]


def most_rows(width: int, lanes: int) -> int:
    """The most rows a register tile of `width` columns takes: TILE_ROWS for tiles of whole
    vectors; a tile narrower than a vector (728 or 88 channels) fills the registers with rows
    instead: a depthwise conv over a 19-pixel image row then runs as one tile of 19 rows, not
    as 8 + 8 + 3 with a bounds check in every step."""
    return TILE_ROWS if width >= lanes or width % 4 else ACCUMULATOR_REGISTERS


def tile_height(rows: int, most: int) -> int:
    """Rows per register tile: `most` (see most_rows), or the largest from there down to 4
    that divides the row count (a 7x7 or 14x14 image), else `most` (the last tile cut short)."""
    for height in range(most, 3, -1):
        if rows % height == 0:
            return height
    return most
