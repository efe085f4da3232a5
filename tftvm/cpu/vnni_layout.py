"""The packed weight layout both bf16 units read: pairs along k side by side ("VNNI" order).

AMX's TDPBF16PS and AVX512-BF16's VDPBF16PS both multiply pairs of bf16 values along k and
add each pair's two products into one f32 lane, so both read B [k, n] with the pair
B[2r, j], B[2r + 1, j] in one 32-bit lane: packed as [n / 16, k / 2, 16, 2], one 16-column
slab after another, each slab row (16 pairs, 64 bytes) one zmm register or one AMX tile row.
precision.py packs weights once in this layout, and either unit's kernels read them. The
kernels compute COLUMN_BLOCK columns at a time, so the packed n is padded with zero columns to
a multiple of it; the kernels write only the output's n columns.
"""
from __future__ import annotations

COLUMN_BLOCK = 32  # two 16-column slabs: a kernel's block of results is this wide


def packed_shape(k: int, n: int) -> tuple[int, int, int, int]:
    """The shape of B [k, n] packed for a matmul kernel, its columns padded."""
    return (padded_columns(n) // 16, k // 2, 16, 2)


def conv_packed_shape(kh: int, kw: int, c: int, o: int) -> tuple:
    """The shape of HWIO conv weights [kh, kw, c, o] packed for a conv kernel: per window
    position, the [c, o] matrix packed as for a matmul."""
    return (padded_columns(o) // 16, kh, kw, c // 2, 16, 2)


def padded_columns(n: int) -> int:
    """`n` rounded up to whole column blocks."""
    return -(-n // COLUMN_BLOCK) * COLUMN_BLOCK
