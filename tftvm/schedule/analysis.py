"""What the default schedule's rules ask of a block: its loops and iteration kinds, how
inputs are indexed, how much work it is, and the CPU's vector width.

Dims that are not static are read at TYPICAL_DIM where a size must be guessed (a batch, a
length); a rule never splits a symbolic extent by a vector, which would leave a bounds
check in the vector loop.
"""
from __future__ import annotations

import dataclasses
import functools

# A block with fewer loop iterations than this runs on the calling thread: waking the
# pool costs tens of microseconds, more than the work (an RNN's step, batch 1).
PARALLEL_MIN_ITERATIONS = 1 << 21
# ... or where it reads more than one core's L2 holds (a classifier's 1280 x 1000 weights at
# batch 1: 1.3M iterations, but 5 MB streamed from L3, which two cores stream twice as fast).
PARALLEL_MIN_READ_BYTES = 2 << 20
# ... or, for an elementwise block, where it reads and writes more than this: a pass over
# memory with no reduction to amortize the wake-up (EfficientNet's squeeze-excite multiply at
# 112 x 112 x 32: 1.6 MB read, 0.8 MB written as bf16) is worth two cores from a smaller size.
# An RNN step's elementwise gates stay far below it.
PARALLEL_MIN_ELEMENTWISE_BYTES = 1 << 20
TYPICAL_DIM = 64  # what a symbolic dim counts as
DEFAULT_VECTOR_BITS = 512  # where LLVM cannot say (AVX-512; LLVM splits wider vectors on narrower targets)


@dataclasses.dataclass
class BlockInfo:
    """A block the rules may schedule: its statement, its loops (one per iteration variable),
    how many leading ones are data parallel, the vector lanes of what it writes, and
    `parallel`, which runs a loop on TVM's threads where the block is large enough to pay
    for waking them (else does nothing)."""

    stmt: object
    loops: list
    spatial: int
    lanes: int
    parallel: object

    @classmethod
    def of(cls, sch, block) -> "BlockInfo | None":
        """None where the block has no loops, loops that are not its iteration variables one
        to one, or no data-parallel leading loop: the rules leave such a block as it is."""
        stmt = sch.get(block)
        loops = sch.get_loops(block)
        if not loops or len(loops) != len(stmt.iter_vars):
            return None
        spatial = 0
        for iv in stmt.iter_vars:
            if int(iv.iter_type) != 0:  # 0: data parallel
                break
            spatial += 1
        if spatial == 0:
            return None
        read = read_bytes(stmt)
        moved = read + _bytes(w.source for w in stmt.writes)
        worth_it = (iterations(sch, loops) >= PARALLEL_MIN_ITERATIONS or read >= PARALLEL_MIN_READ_BYTES
                    or is_spatial(stmt) and moved >= PARALLEL_MIN_ELEMENTWISE_BYTES)  # fmt: skip
        parallel = sch.parallel if worth_it else lambda loop: None
        return cls(stmt, loops, spatial, vector_lanes(write_dtype(stmt)), parallel)


def is_spatial(stmt) -> bool:
    """Every iteration variable of the block is data parallel (an elementwise block)."""
    return all(int(iv.iter_type) == 0 for iv in stmt.iter_vars)  # 0: data parallel


def uses(expr, var) -> bool:
    """Whether `expr` depends on `var`."""
    from tvm import tirx

    return any(v.same_as(var) for v in tirx.analysis.undefined_vars(expr))


def one_reduction(stmt, loops, spatial) -> bool:
    """Spatial loops then commutative reduction loops, one output buffer."""
    if spatial == len(loops) or len(stmt.writes) != 1:
        return False
    return all(int(iv.iter_type) == 2 for iv in stmt.iter_vars[spatial:])  # 2: commutative reduce


def columns_contiguous(stmt, spatial) -> bool:
    """Whether the last output axis walks the last axis of every input that it indexes (B of
    A·B, a conv's weights): register tiles along it load whole vectors. Weights packed by tile
    (lowering/pack_weights: [j // width, ..., j % width]) pass too. Tiled along an axis that is
    not (the keys of Q·Kᵀ), every vector would be gathered at a row's stride."""
    from tvm import tirx

    column = stmt.iter_vars[spatial - 1].var
    for read in stmt.reads:
        for r in read.region[:-1]:
            if uses(r.min, column) and not isinstance(r.min, tirx.FloorDiv):
                return False
    return True


def iterations(sch, loops) -> int:
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


def input_reads(stmt) -> list:
    """The block's read regions of buffers other than the one it writes (a reduction reads
    its own output)."""
    written = [w.source for w in stmt.writes]
    return [read for read in stmt.reads if not any(read.source.same_as(b) for b in written)]


def read_bytes(stmt) -> int:
    """The bytes of the buffers the block reads (not the one it writes), symbolic dims counted
    as TYPICAL_DIM."""
    return _bytes(read.source for read in input_reads(stmt))


def _bytes(buffers) -> int:
    """The bytes of `buffers` (each counted once), symbolic dims counted as TYPICAL_DIM."""
    import tvm_ffi
    from tvm import tirx

    total, seen = 0, []
    for buffer in buffers:
        if any(buffer.same_as(b) for b in seen):
            continue
        seen.append(buffer)
        elements = 1
        for dim in buffer.shape:
            elements *= int(dim) if isinstance(dim, tirx.IntImm) else TYPICAL_DIM
        total += elements * max(1, tvm_ffi.dtype(str(buffer.dtype)).bits // 8)
    return total


def static_rows(sch, loops) -> int:
    """The product of the static extents of `loops` (a symbolic batch left out): the rows of one image."""
    from tvm import tirx

    product = 1
    for loop in loops:
        extent = sch.get(loop).extent
        product *= int(extent) if isinstance(extent, tirx.IntImm) else 1
    return product


def write_dtype(stmt) -> str:
    writes = list(stmt.writes)
    return str(writes[0].source.dtype) if writes else "float32"


def vector_bits() -> int:
    """The width of a vector register in bits, as LLVM gives it for the current target (the
    host's where none is set); DEFAULT_VECTOR_BITS where it cannot say."""
    from tvm.target import Target

    return _vector_bits(str(Target.current(allow_none=True)))


@functools.lru_cache(maxsize=None)
def _vector_bits(target: str) -> int:
    from tvm.target import Target
    from tvm.target.codegen import llvm_get_vector_width

    try:
        bits = int(llvm_get_vector_width(Target(target) if target != "None" else None))
    except Exception:  # a TVM built without LLVM raises its own error type
        bits = -1
    return bits if bits > 0 else DEFAULT_VECTOR_BITS


def vector_lanes(dtype: str) -> int:
    """Elements of `dtype` in one vector register: the schedule's tile widths, and the width
    lowering/pack_weights packs conv weights by (the two must agree)."""
    import tvm_ffi

    return max(1, vector_bits() // 8 // max(1, tvm_ffi.dtype(dtype).bits // 8))
