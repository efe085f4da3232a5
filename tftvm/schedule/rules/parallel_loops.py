"""The rule for every block no other rule took: its leading data-parallel loops fused and
run in parallel; an elementwise block's static inner loops (all of them, or the image of a
`None` batch) vectorized explicitly, or, where they make no whole vectors, left as a serial
loop of up to SERIAL_CHUNK elements inside each parallel iteration."""
from __future__ import annotations

from ..rule import BlockRule
from ..vectorize import vectorize_by_registers

# A padding stage over 3 channels (224 x 3 elements a row) makes no whole vectors. Run in
# parallel element by element, each element pays for the parallel loop's index arithmetic;
# a serial row per parallel iteration is one loop that LLVM simplifies.
SERIAL_CHUNK = 4096
MAX_CHUNK_VECTORS = 8  # the most unrolled vectors in a chunk of pixels of an odd channel count


class ParallelLoops(BlockRule):
    name = "parallel loops"

    def match(self, sch, block, info):
        return static_suffix(sch, info.loops, info.lanes) if info.spatial == len(info.loops) else (0, 0)

    def apply(self, sch, block, info, plan, schedule_block) -> None:
        static, chunk = plan
        loops, parallel = info.loops, info.parallel
        if static:
            # Only static loops are split by a vector: a symbolic extent would leave a bounds
            # check in the vector loop (and left to LLVM, a padding stage's index arithmetic
            # stays scalar).
            inner_loops = loops[len(loops) - static :]
            outer, inner = sch.split(sch.fuse(*inner_loops) if static > 1 else inner_loops[0], [None, chunk])
            vectorize_by_registers(sch, inner, info.lanes)
            parallel(sch.fuse(*loops[: len(loops) - static], outer) if static < len(loops) else outer)
        else:
            outer = loops[: info.spatial - serial_suffix(sch, loops[: info.spatial])]
            parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])


def serial_suffix(sch, loops) -> int:
    """How many innermost loops, static and together at most SERIAL_CHUNK iterations, stay
    serial inside each parallel iteration; at least one loop stays outside."""
    from tvm import tirx

    count, product = 0, 1
    for loop in reversed(loops[1:]):
        extent = sch.get(loop).extent
        if not isinstance(extent, tirx.IntImm) or product * int(extent) > SERIAL_CHUNK:
            break
        product *= int(extent)
        count += 1
    return count


def static_suffix(sch, loops, lanes: int) -> tuple[int, int]:
    """How many innermost loops have static extents whose product is a whole number of
    chunks, and the chunk: the widest of a vector, a half or a quarter that divides the
    innermost extent (so that no vector straddles two pixels of a pad of 728 channels, whose
    condition then differs lane by lane); else as many whole vectors as make a whole number
    of innermost rows (3 channels: 3 vectors of 16 pixels), up to MAX_CHUNK_VECTORS, in which
    each lane reads the same channel in every chunk (in one vector of 3-channel pixels, each
    lane computes its channel, and a per-channel scale is gathered), and only where such
    chunks tile a row of pixels. (0, 0) if none."""
    import math

    from tvm import tirx

    extents = []
    for loop in reversed(loops):
        extent = sch.get(loop).extent
        if not isinstance(extent, tirx.IntImm):
            break
        extents.append(int(extent))
    if not extents:
        return 0, 0
    width = next((w for w in (lanes, lanes // 2, lanes // 4) if w >= 4 and extents[0] % w == 0), None)
    if width is None:
        vectors = extents[0] // math.gcd(extents[0], lanes)
        width = lanes * (vectors if vectors <= MAX_CHUNK_VECTORS else 1)
        if len(extents) < 2 or extents[0] * extents[1] % width:
            return 0, 0  # chunks would straddle rows (225 pixels of 4 channels): each lane's index divided apart
    product, best = 1, 0
    for count, extent in enumerate(extents, 1):
        product *= extent
        best = count if product % width == 0 else best
    return (best, width) if best else (0, 0)
