"""A default CPU schedule so untuned kernels are not serial scalar loops.

Chains of elementwise blocks are first inlined into one loop (TVM's AutoInline rule).
For every block, the leading data-parallel loops are fused and run in parallel (unless
the block is too small to pay for waking TVM's worker threads, as each step of an RNN's
loop is); a block that is data-parallel throughout gets its static inner loops (all of
them, or the image of a `None` batch) vectorized explicitly. A reduction over a static
output axis of a multiple of 4 columns (matmul, conv, pooling) is tiled: each parallel
task accumulates a register tile of up to 8 rows (as many as divide the rows: 7 for a
7x7 image) and writes it back once, where the inputs are contiguous along the columns.
A reduction along the inputs' contiguous last axis that no such tile fits (a softmax's
row max, a layer norm's mean, Q·Kᵀ's dot products) accumulates a vector of partial results
per output instead (rfactor). A step TVM refuses leaves that block as it was.
"""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)

VECTOR_BYTES = 64  # one AVX-512 register; LLVM splits it on narrower targets
# A block with fewer loop iterations than this runs on the calling thread: waking the
# pool costs tens of microseconds, more than the work (Keras LSTM(64), 20 steps, batch 1:
# 3.2x TF with every block parallel, 0.8x with this rule). A symbolic dim counts as
# TYPICAL_DIM (a batch, a length).
PARALLEL_MIN_ITERATIONS = 1 << 21
TYPICAL_DIM = 64


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
        _inline_elementwise(sch, blocks)
        for block in sch.get_child_blocks(sch.get_sblock("root")):
            trial = sch.copy()
            try:
                if not _inline_copy(trial, block):
                    _schedule_block(trial, block)
            except Exception as err:  # TVM raises its own error types for refused steps
                log.debug("default schedule left block as is: %s", err)
                continue
            sch = trial
    return sch


def _inline_elementwise(sch, blocks) -> None:
    """Inline each elementwise block into its consumers where they are all elementwise too
    (TVM's AutoInline rule decides what may go): a chain such as GELU's six ops then runs as one
    loop in one pass over memory, not a loop and a pass over 1 MB each (a GELU on 128 x 2048).
    Never into a reduction, which would compute the block again for every reuse of its output;
    nor a reduction's only consumer (a conv's ReLU6 before a pad), which _tile_reduction applies
    as each register tile is written back. A swish after a conv reads the conv twice: inlined,
    it becomes the conv's only consumer, and so its epilogue."""
    from tvm.s_tir import meta_schedule as ms

    rule = ms.schedule_rule.AutoInline(into_producer=False, into_consumer=True, inline_const_tensor=True,
                                       disallow_if_then_else=True, require_injective=True, require_ordered=True,
                                       disallow_op=None)  # fmt: skip
    for block in blocks:
        consumers = sch.get_consumers(block)
        if not consumers or not all(_spatial(sch.get(b)) for b in [block, *consumers]):
            continue
        reductions = [p for p in sch.get_producers(block) if not _spatial(sch.get(p))]
        if any(len(sch.get_consumers(p)) == 1 for p in reductions):
            continue  # the epilogue of a reduction that has no other consumer
        try:
            rule.apply(sch, block)  # inlines in place, or leaves the block as it is
        except Exception as err:  # TVM raises its own error types for refused steps
            log.debug("block not inlined: %s", err)


def _spatial(stmt) -> bool:
    return all(int(iv.iter_type) == 0 for iv in stmt.iter_vars)  # 0: data parallel


def _inline_copy(sch, block) -> bool:
    """Inline a block that only copies (a conv's padding stage where there is no padding):
    a pass over memory saved. False where it is no copy or TVM refuses (it writes an output)."""
    from tvm.ir.expr import TensorLoad  # what tirx.BufferLoad makes
    from tvm.tirx.stmt import BufferStore

    body = sch.get(block).body
    if not (isinstance(body, BufferStore) and isinstance(body.value, TensorLoad)):
        return False
    try:
        sch.compute_inline(block)
    except Exception as err:  # TVM raises its own error types for refused steps
        log.debug("copy not inlined: %s", err)
        return False
    return True


def _schedule_block(sch, block) -> None:
    from tvm import tirx

    stmt = sch.get(block)
    loops = sch.get_loops(block)
    if not loops or len(loops) != len(stmt.iter_vars):
        return
    spatial = 0
    for iv in stmt.iter_vars:
        if int(iv.iter_type) != 0:  # 0: data parallel
            break
        spatial += 1
    if spatial == 0:
        return
    lanes = vector_lanes(_write_dtype(stmt))
    parallel = sch.parallel if _iterations(sch, loops) >= PARALLEL_MIN_ITERATIONS else lambda loop: None
    tileable = _tileable_reduction(sch, stmt, loops, spatial, lanes)
    if tileable and _columns_contiguous(stmt, spatial):
        _tile_reduction(sch, block, loops, spatial, lanes, parallel)
        return
    if tileable and (b := _transposed_operand(sch, stmt, loops)) is not None:
        # A·Bᵀ of a dense layer's gradient (dY·Wᵀ): B copied transposed once per call (a few
        # tens of µs), then register tiles as for A·B. As dot products it ran at 51 GFLOP/s, so
        # 68-107 (4096 x 512 x 128, 4096 x 128 x 512).
        copy = sch.cache_read(block, b, "global")
        sch.transform_layout(copy, ("write", 0), lambda j, k: (k, j))
        _transpose_copy(sch, copy, lanes)
        _tile_reduction(sch, block, sch.get_loops(block), spatial, lanes, parallel)
        return
    if width := _contiguous_reduction_width(stmt, loops, spatial, lanes):
        _vectorize_reduction(sch, block, spatial, width, parallel)
        return
    if width := _column_reduction_width(sch, stmt, loops, spatial, lanes):
        _vectorize_columns(sch, block, spatial, width, parallel)
        return
    if spatial == len(loops) and (across := _transposed_axis(sch, stmt, loops, lanes)) is not None:
        _tile_transpose(sch, block, across, lanes, parallel)
        return
    static, width = _static_suffix(sch, loops, lanes) if spatial == len(loops) else (0, 0)
    if static:
        # Vectorize the static inner loops (a None batch's image, not its batch): a split of a
        # symbolic extent would leave a bounds check in the vector loop, and left to LLVM the
        # index arithmetic of a padding stage stayed scalar (4x TF on MobileNetV2's).
        inner_loops = loops[len(loops) - static :]
        outer, inner = sch.split(sch.fuse(*inner_loops) if static > 1 else inner_loops[0], [None, width])
        sch.vectorize(inner)
        parallel(sch.fuse(*loops[: len(loops) - static], outer) if static < len(loops) else outer)
    else:
        parallel(sch.fuse(*loops[:spatial]) if spatial > 1 else loops[0])


def _transposed_axis(sch, stmt, loops, lanes) -> int | None:
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
        if _uses(last, column) or not any(_uses(r.min, column) for r in read.region[:-1]):
            continue
        across = next((i for i, iv in enumerate(stmt.iter_vars[:-1]) if last.same_as(iv.var)), None)
        if across is None:
            continue
        extents = [sch.get(loops[i]).extent for i in (across, len(loops) - 1)]
        if all(isinstance(e, tirx.IntImm) and int(e) % lanes == 0 for e in extents):
            return across
    return None


def _tile_transpose(sch, block, across: int, lanes: int, parallel) -> None:
    """Tiles of `lanes` x `lanes`: a tile's rows of the input are read while they are in
    cache, each output row written as one vector (untiled, each vector gathered from `lanes`
    input rows a row apart, and a 4096 x 512 transpose took 12x as long)."""
    loops = sch.get_loops(block)
    rows_outer, rows = sch.split(loops[across], [None, lanes])
    columns_outer, columns = sch.split(loops[-1], [None, lanes])
    outer = [loop for i, loop in enumerate(loops[:-1]) if i != across]
    sch.reorder(*outer, rows_outer, columns_outer, rows, columns)
    sch.vectorize(columns)
    parallel(sch.fuse(*outer, rows_outer, columns_outer))


def _static_suffix(sch, loops, lanes: int) -> tuple[int, int]:
    """How many innermost loops have static extents whose product is a whole number of
    vectors, and the vector width: the widest of a vector, a half or a quarter that divides
    the innermost extent (so that no vector straddles two pixels of a pad of 728 channels, whose
    condition then differs lane by lane), else a whole vector (a pad of 3 channels: 224 x 3
    of them). (0, 0) if none."""
    from tvm import tirx

    extents = []
    for loop in reversed(loops):
        extent = sch.get(loop).extent
        if not isinstance(extent, tirx.IntImm):
            break
        extents.append(int(extent))
    if not extents:
        return 0, 0
    width = next((w for w in (lanes, lanes // 2, lanes // 4) if w >= 4 and extents[0] % w == 0), lanes)
    product, best = 1, 0
    for count, extent in enumerate(extents, 1):
        product *= extent
        best = count if product % width == 0 else best
    return (best, width) if best else (0, 0)


def _iterations(sch, loops) -> int:
    """How many times the block runs: the product of its loops' extents, symbolic ones
    counted as TYPICAL_DIM."""
    from tvm import tirx
    from tvm.sym.analyzer import Analyzer

    total, typical = 1, Analyzer()
    for loop in loops:
        extent = sch.get(loop).extent
        if not isinstance(extent, tirx.IntImm):
            for var in tirx.analysis.undefined_vars(extent):
                typical.bind(var, tirx.IntImm(str(var.ty.dtype), TYPICAL_DIM))
            extent = typical.simplify(extent)
        total *= max(1, int(extent)) if isinstance(extent, tirx.IntImm) else TYPICAL_DIM
    return total


TILE_ROWS = 8  # a register tile of up to 8 rows (_tile_height) x 2 vectors of accumulators (tile_width)
ACCUMULATOR_REGISTERS = 28  # of AVX-512's 32 vector registers; the rest hold a weight vector and inputs


def _contiguous_reduction_width(stmt, loops, spatial, lanes) -> int | None:
    """The vector width to split the innermost reduction by where it walks the last axis of
    every input that it indexes (a softmax's row max, a mean over features, Q·Kᵀ's dot products
    over the head dim), else None. Its extent must be static and a multiple of the width."""
    from tvm import tirx

    if not _one_reduction(stmt, loops, spatial):
        return None
    inner = stmt.iter_vars[-1]
    extent = inner.dom.extent
    if not isinstance(extent, tirx.IntImm):
        return None
    for read in stmt.reads:
        indices = [_uses(r.min, inner.var) for r in read.region]
        if any(indices[:-1]) or (indices[-1] and not read.region[-1].min.same_as(inner.var)):
            return None
    # Each output ends with a sum across the lanes, one scalar add per lane: the widest vector
    # whose lanes are at most the square root of the extent. 16 lanes over a head dim of 128
    # took 1.77 ms for Q·Kᵀ (512 x 30 x 30), 8 lanes 1.14 ms; a mean over 512 took 2.6 µs at
    # 16 lanes and 3.7 at 8; a dot product of 64 took 268 µs at 8 lanes and 318 at 4.
    return next((w for w in (lanes, lanes // 2, lanes // 4) if w >= 4 and int(extent) % w == 0
                 and w * w <= int(extent)), None)


def _transpose_copy(sch, copy, lanes: int) -> None:
    """The transposed copy of B (_transposed_operand) in tiles, in parallel: the copy block
    iterates B's rows, so left to _schedule_block each vector of it was stored 16 rows apart
    on one thread, and a 1024 x 1024 B (an MLP's dY·Wᵀ, 64 rows) took 6 of its 7.6 ms."""
    from tvm import tirx

    rows, cols = sch.get_loops(copy)  # B's: rows j, then k along them
    extents = [sch.get(loop).extent for loop in (rows, cols)]
    if not all(isinstance(e, tirx.IntImm) and int(e) % lanes == 0 for e in extents):
        _schedule_block(sch, copy)
        return
    sch.reorder(cols, rows)  # the copy's own rows (B's columns) outside: its rows written whole
    large = int(extents[0]) * int(extents[1]) >= PARALLEL_MIN_COPY
    _tile_transpose(sch, copy, 0, lanes, sch.parallel if large else lambda loop: None)


PARALLEL_MIN_COPY = 1 << 18  # elements (1 MB of float32): below, a thread's launch costs more


def _transposed_operand(sch, stmt, loops) -> int | None:
    """For a 2-D matmul C[i, j] = sum_k A[i, k] B[j, k] with static extents, at least
    TRANSPOSE_MIN_OUTPUTS outputs and a reduction of at least a tile's rows, the index of B
    among the block's reads; else None. (Batched forms, Q·Kᵀ of attention, keep the dot
    products of _vectorize_reduction, tuned for them.)"""
    from tvm import tirx

    if len(loops) != 3 or len(stmt.iter_vars) != 3:
        return None
    extents = [sch.get(loop).extent for loop in loops]
    if not all(isinstance(e, tirx.IntImm) for e in extents):
        return None
    rows, cols, depth = (int(e) for e in extents)
    if rows * cols < TRANSPOSE_MIN_OUTPUTS or depth < TILE_ROWS:
        return None
    _, j, k = (iv.var for iv in stmt.iter_vars)
    for index, read in enumerate(stmt.reads):
        region = [r.min for r in read.region]
        if len(region) == 2 and region[0].same_as(j) and region[1].same_as(k):
            return index
    return None


TRANSPOSE_MIN_OUTPUTS = 1 << 16  # 256 x 256: below, the copy costs more than dot products lose


def _column_reduction_width(sch, stmt, loops, spatial, lanes) -> int | None:
    """The vector width of the output's last axis where a reduction runs over outer axes
    while that axis walks the last axis of every input (a bias gradient: the sum of a
    (batch, length, features) tensor over batch and length), else None. Its extent must be
    static and a multiple of the width."""
    from tvm import tirx

    if not _one_reduction(stmt, loops, spatial):
        return None
    column = stmt.iter_vars[spatial - 1]
    extent = sch.get(loops[spatial - 1]).extent
    if not isinstance(extent, tirx.IntImm):
        return None
    reductions = [iv.var for iv in stmt.iter_vars[spatial:]]
    for read in stmt.reads:
        last = read.region[-1].min
        if not last.same_as(column.var) or any(_uses(last, r) for r in reductions):
            return None
        if any(_uses(r.min, column.var) for r in read.region[:-1]):
            return None
    return next((w for w in (4 * lanes, 2 * lanes, lanes, lanes // 2, lanes // 4)
                 if w >= 4 and int(extent) % w == 0), None)


def _vectorize_columns(sch, block, spatial, width, parallel) -> None:
    """A column reduction: each task owns `width` neighbouring outputs and streams every
    row of the input once, adding a row's `width` contiguous values to them with vector adds
    (walking an output's column at the row stride instead made a bias gradient of
    (64, 64, 512) 20x slower than TF's)."""
    loops = sch.get_loops(block)
    outer, lanes = sch.split(loops[spatial - 1], [None, width])
    reductions = sch.get_loops(block)[spatial + 1 :]
    sch.reorder(*reductions, lanes)
    fused = sch.fuse(*sch.get_loops(block)[:spatial]) if spatial > 1 else outer
    sch.vectorize(lanes)  # annotations first: a reduction split from its init fails their checks
    parallel(fused)
    init = sch.decompose_reduction(block, reductions[0])
    sch.vectorize(sch.get_loops(init)[-1])


def _one_reduction(stmt, loops, spatial) -> bool:
    """Spatial loops then commutative reduction loops, one output buffer."""
    if spatial == len(loops) or len(stmt.writes) != 1:
        return False
    return all(int(iv.iter_type) == 2 for iv in stmt.iter_vars[spatial:])  # 2: commutative reduce


def _columns_contiguous(stmt, spatial) -> bool:
    """Whether the last output axis walks the last axis of every input that it indexes (B of
    A·B, a conv's weights): register tiles along it load whole vectors. Weights packed by tile
    (pack_weights: [j // width, ..., j % width]) pass too. Tiled along an axis that is not (the
    keys of Q·Kᵀ), every vector would be gathered at a row's stride."""
    from tvm import tirx

    column = stmt.iter_vars[spatial - 1].var
    for read in stmt.reads:
        for r in read.region[:-1]:
            if _uses(r.min, column) and not isinstance(r.min, tirx.FloorDiv):
                return False
    return True


def _uses(expr, var) -> bool:
    from tvm import tirx

    return any(v.same_as(var) for v in tirx.analysis.undefined_vars(expr))


def _vectorize_reduction(sch, block, spatial, width, parallel) -> None:
    """A reduction along contiguous memory: each output accumulates `width` partial results
    in one vector register (rfactor), summed once at the end. A task computes a block of
    neighbouring outputs together (_dot_block: 5 queries x 5 keys of Q·Kᵀ over 30 keys): their
    accumulators stay in registers, each step loads a vector of each row and column once for
    all of them, and the task's scratch buffer is allocated once (per output, that allocation
    cost more than a 128-long dot product)."""
    from tvm import tirx

    stmt = sch.get(block)
    loops = sch.get_loops(block)
    _, lanes = sch.split(loops[-1], [None, width])
    partial = sch.rfactor(lanes, factor_axis=spatial)
    outputs = sch.get_loops(block)[:spatial]
    # Only an axis that some input does not depend on is blocked (the keys for the queries'
    # rows, and the reverse): blocking rows that share nothing (a layer norm's mean) was
    # slower (2.6 -> 3.5 µs on 128 x 512).
    sizes = [_shared_extent(sch, stmt, loop, iv) for loop, iv in zip(outputs, stmt.iter_vars)][-2:]
    sizes = [1] * (2 - len(sizes)) + sizes
    outer, neighbours = list(outputs[:-2]), []
    for loop, factor in zip(outputs[-2:], _dot_block(*sizes)[2 - len(outputs[-2:]) :]):
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


def _shared_extent(sch, stmt, loop, iter_var) -> int:
    """The loop's static extent where some input of the block does not depend on its axis
    (a vector of that input serves every output along it), else 1."""
    from tvm import tirx

    extent = sch.get(loop).extent
    if not isinstance(extent, tirx.IntImm):
        return 1
    reused = any(not any(_uses(r.min, iter_var.var) for r in read.region) for read in stmt.reads)
    return int(extent) if reused else 1


DOT_ACCUMULATORS = 25  # outputs of one task in _vectorize_reduction, one vector register each


def _dot_block(rows: int, cols: int) -> tuple[int, int]:
    """Outputs per task along the last two output axes (1 for a symbolic one): divisors of
    each (a prime up to DOT_ACCUMULATORS taken whole) with at most DOT_ACCUMULATORS outputs,
    the most outputs per vector loaded (r * c / (r + c)), then the most columns. Q·Kᵀ over 30
    keys: 5 x 5, 2.5 outputs per load; it ran 1 x 15 (0.94 per load) at 2.5x the time."""
    def divisors(n):
        return [d for d in range(1, min(n, DOT_ACCUMULATORS) + 1) if n % d == 0]

    pairs = [(r, c) for r in divisors(rows) for c in divisors(cols) if r * c <= DOT_ACCUMULATORS]
    return max(pairs, key=lambda rc: (rc[0] * rc[1] / (rc[0] + rc[1]), rc[1]))


def _tileable_reduction(sch, stmt, loops, spatial, lanes) -> bool:
    """Spatial loops then reductions, the last spatial extent static: a multiple of a tile
    width, or from 4 to two vectors (padded to tiles, or taken as one tile)."""
    from tvm import tirx

    if spatial < 2 or not _one_reduction(stmt, loops, spatial):
        return False
    cols = sch.get(loops[spatial - 1]).extent
    return isinstance(cols, tirx.IntImm) and (tile_width(int(cols), lanes) is not None or 4 <= int(cols) <= 2 * lanes)


def _padded_columns(cols: int, lanes: int) -> int | None:
    """A column count that no tile width divides, padded for the widest tile that adds at most
    a quarter more columns (30 -> 32, 17 -> 20, 10 -> 12); None where none does (5 -> 8)."""
    for width in (2 * lanes, lanes, lanes // 2, lanes // 4):
        padded = -(-cols // width) * width
        if width >= 4 and 4 * padded <= 5 * cols:
            return padded
    return None


def tile_width(cols: int, lanes: int) -> int | None:
    """Columns per register tile: two vectors, one, or a half or quarter vector where the
    column count is no multiple of a vector (Xception's 728 channels, NASNet's 88). (Tiles of
    7 half vectors for 728 columns, 4 rows tall, were 1.0-3.2x slower than 8 columns x 28 rows.)"""
    for width in (2 * lanes, lanes, lanes // 2, lanes // 4):
        if width >= 4 and cols % width == 0:
            return width
    return None


def _tile_reduction(sch, block, loops, spatial, lanes, parallel) -> None:
    """Matmul-like blocks: parallel over output tiles, each tile accumulated in registers
    (vectorized along the last output axis) and written back once."""
    from tvm import tirx

    rows = sch.get(loops[spatial - 2]).extent
    cols = int(sch.get(loops[spatial - 1]).extent)
    padded_cols = cols if tile_width(cols, lanes) else _padded_columns(cols, lanes) or cols
    row_factor = 1 if isinstance(rows, tirx.IntImm) else TILE_ROWS
    copies = []
    if padded_cols != cols or row_factor > 1:
        copies = _pad(sch, block, spatial, len(loops), row_factor, padded_cols if padded_cols != cols else 1)
        if copies is None:  # no einsum (a conv or pool): rows and columns as they are
            padded_cols = cols
    # Columns that no tile width divides and that cannot be padded (a conv of NASNetMobile's 11
    # or 22 channels) take one tile of them all, an odd-sized vector that LLVM splits; as scalar
    # code those convs ran at 1.5% of sgemm, and the model's VM took 28.0 ms, now 20.0.
    width = tile_width(padded_cols, lanes) or padded_cols
    if isinstance(rows, tirx.IntImm):
        height = min(int(rows), _tile_height(int(rows), _most_rows(width, lanes)))
    else:  # padded to whole tiles: a batch of 1 pays for a tile's rows
        height = TILE_ROWS if copies is not None else 1  # unpadded: tiles of one row
    loops = sch.get_loops(block)
    batch, rows_loop, cols_loop, reductions = loops[: spatial - 2], *loops[spatial - 2 : spatial], loops[spatial:]
    columns_first = isinstance(rows, tirx.IntImm) and (
        int(sch.get(cols_loop).extent) > _static_rows(sch, [*batch, rows_loop]))
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
        # of the weights (590 KB for a 3x3 conv at 512 channels) outweighs its inputs. Walking the
        # tiles column block by column block keeps that slice in cache for every row tile; row tile
        # by row tile read all the weights again for each (ResNet50's 7x7 3x3 conv: 34% of peak).
        # A symbolic batch stays outermost.
        rest = outer[:-1]
        leading = [loop for loop in rest if not isinstance(sch.get(loop).extent, tirx.IntImm)]
        outer = [*leading, jo, *(loop for loop in rest if loop not in leading)]
    sch.reorder(*outer, *reductions, *inner)
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    write_back = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(write_back, fused)
    # Padded rows are written back into the padded buffer, then copied out: the epilogue
    # goes into that copy (a bounds check on each written row cost 25% at 256 rows).
    _inline_epilogue(sch, sch.get_consumers(write_back)[0] if copies else write_back)
    sch.vectorize(sch.get_loops(write_back)[-1])
    parallel(fused)
    if len(inner) == 2:
        sch.unroll(inner[0])
    sch.vectorize(ji)
    # Annotations first: a reduction split from its init no longer passes their checks.
    init = sch.decompose_reduction(block, reductions[0])
    sch.vectorize(sch.get_loops(init)[-1])
    for name in copies or ():  # the padding copies that are still there (not inlined above)
        try:
            copy = sch.get_sblock(name)
        except Exception:  # TVM raises its own error types for a missing block
            continue
        _schedule_block(sch, copy)


def _static_rows(sch, loops) -> int:
    """The product of the static extents of `loops` (a symbolic batch left out): the rows of one image."""
    from tvm import tirx

    product = 1
    for loop in loops:
        extent = sch.get(loop).extent
        product *= int(extent) if isinstance(extent, tirx.IntImm) else 1
    return product


def _inline_epilogue(sch, write_back) -> None:
    """Apply the elementwise ops after the reduction (bias add, ReLU, a folded batch norm)
    as each tile is written back, not in passes over the whole output."""
    while len(consumers := sch.get_consumers(write_back)) == 1:
        try:
            sch.reverse_compute_inline(consumers[0])
        except Exception as err:  # TVM raises its own error types for refused steps
            log.debug("epilogue not inlined: %s", err)
            return


def _pad(sch, block, spatial, num_loops, row_factor, col_factor) -> list | None:
    """Pad a symbolic row count (a Dense layer's batch) to whole tiles, and a column count that
    no tile width divides (30 keys, 10 classes) to `col_factor`: the operands are copied into
    padded buffers and the result out (pad_einsum), so that no tile needs a bounds check
    (one-row tiles were 2-3.7x TF at 32-256 rows, a bounds-checked tile 1.3x; 30 columns ran
    as scalar code). The new copy blocks' names, or None where the block is no einsum (a
    conv's symbolic width)."""
    root = sch.get_sblock("root")
    before = {sch.get(b).name_hint for b in sch.get_child_blocks(root)}
    try:
        sch.pad_einsum(block, [1] * (spatial - 2) + [row_factor, col_factor] + [1] * (num_loops - spatial))
    except Exception as err:  # TVM raises its own error types for refused steps
        log.debug("symbolic rows not padded: %s", err)
        return None
    return [sch.get(b).name_hint for b in sch.get_child_blocks(root) if sch.get(b).name_hint not in before]


def _most_rows(width: int, lanes: int) -> int:
    """The most rows a register tile of `width` columns takes: TILE_ROWS for tiles of whole
    vectors (measured best on ResNet50); a tile narrower than a vector (728 or 88 channels)
    fills the registers with rows instead: a depthwise conv over a 19-pixel image row then
    runs as one tile of 19 rows, not as 8 + 8 + 3 with a bounds check in every step."""
    return TILE_ROWS if width >= lanes or width % 4 else ACCUMULATOR_REGISTERS


def _tile_height(rows: int, most: int) -> int:
    """Rows per register tile: `most` (see _most_rows), or the largest from there
    down to 4 that divides the row count (a 7x7 or 14x14 image), else `most` (the last tile
    cut short)."""
    for height in range(most, 3, -1):
        if rows % height == 0:
            return height
    return most


def vector_lanes(dtype: str) -> int:
    """Elements of `dtype` in one vector register: the schedule's tile widths, and the width
    pack_weights packs conv weights by (the two must agree)."""
    import tvm_ffi

    return max(1, VECTOR_BYTES // max(1, tvm_ffi.dtype(dtype).bits // 8))


def _write_dtype(stmt) -> str:
    writes = list(stmt.writes)
    return str(writes[0].source.dtype) if writes else "float32"
