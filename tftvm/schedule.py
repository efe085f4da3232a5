"""A default CPU schedule so untuned kernels are not serial scalar loops.

For every block, the leading data-parallel loops are fused and run in parallel;
a block that is data-parallel throughout with a static size also gets its
innermost chunk vectorized explicitly (LLVM vectorizes the others). A step TVM refuses leaves that block as it was. MetaSchedule
tuning (tune.py) replaces this where a database has records.
"""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)

VECTOR_BYTES = 64  # one AVX-512 register; LLVM splits it on narrower targets


def default_cpu_schedule(mod):
    from tvm import s_tir

    sch = s_tir.Schedule(mod)
    for gv in mod.get_global_vars():
        sch.work_on(gv.name_hint)
        try:
            blocks = sch.get_child_blocks(sch.get_sblock("root"))
        except Exception:  # a PrimFunc written without blocks: nothing to schedule
            log.debug("'%s' has no root block; compiled as written", gv.name_hint)
            continue
        for block in blocks:
            trial = sch.copy()
            try:
                _schedule_block(trial, block)
            except Exception as err:  # TVM raises its own error types for refused steps
                log.debug("default schedule left block as is: %s", err)
                continue
            sch = trial
    return sch.mod


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
    fused = sch.fuse(*loops[:spatial]) if spatial > 1 else loops[0]
    lanes = max(1, VECTOR_BYTES // max(1, _dtype_bytes(stmt)))
    extent = sch.get(fused).extent
    if spatial == len(loops) and isinstance(extent, tirx.IntImm) and int(extent) % lanes == 0:
        outer, inner = sch.split(fused, [None, lanes])
        sch.vectorize(inner)
        sch.parallel(outer)
    else:
        # A split of a symbolic extent leaves a bounds check in the vector loop,
        # which is slower than letting LLVM vectorize each parallel chunk.
        sch.parallel(fused)


def _dtype_bytes(stmt) -> int:
    import tvm_ffi

    writes = list(stmt.writes)
    bits = tvm_ffi.dtype(str(writes[0].source.dtype)).bits if writes else 32
    return max(1, bits // 8)
