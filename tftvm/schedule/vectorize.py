"""Vectorizing a loop whose extent is several vector registers."""
from __future__ import annotations


def vectorize_by_registers(sch, loop, lanes: int) -> None:
    """Vectorize `loop`; a loop of 3, 5, 6 or 7 vectors (a tile of 48 columns, a chunk of 16
    pixels of 3 channels) as that many unrolled vectors: LLVM splits a vector of a
    power-of-two count of registers into registers, but scalarizes one of 3."""
    extent = int(sch.get(loop).extent)
    count = extent // lanes
    if extent % lanes or count & (count - 1) == 0:
        sch.vectorize(loop)
        return
    registers, vector = sch.split(loop, [count, lanes])
    sch.unroll(registers)
    sch.vectorize(vector)
