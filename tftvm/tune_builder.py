"""The builder tune() compiles candidates with: worker processes kept for the whole tune.

MetaSchedule's LocalBuilder starts new worker processes for every batch of candidates,
and one more set when it is made, to check its functions; each worker imports TVM,
seconds of CPU. A tune of a few small kernels spent most of its time starting
processes (benchmarks/HISTORY.md, "Tuning's fixed cost"). These workers serve every
batch of one tune and are replaced after MAX_BUILDS_PER_WORKER builds, since TVM's
workers grow with use (the reason LocalBuilder restarts its pool). Builds skip the
tensor-intrinsic import the default build function does: about 27 s per worker on
2 cores, and scheduled CPU kernels need none of it (a tensorized block already holds
the intrinsic's body).
"""
from __future__ import annotations

import os
import shutil

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

MAX_BUILDS_PER_WORKER = 256


def _build_and_export():
    """The function a worker runs: nested, so cloudpickle sends it by value and the worker
    imports TVM only, not tftvm (and with it TensorFlow)."""

    def build_and_export(mod_and_target):
        import tempfile

        from tvm.driver import build as tvm_build
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
        from tvm.support.tar import tar

        mod, target = mod_and_target
        module = tvm_build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)
        path = os.path.join(tempfile.mkdtemp(prefix="tftvm-tune-"), "candidate." + tar.output_format)
        module.export_library(path, fcompile=tar)
        return path

    return build_and_export


@derived_object
class WorkerBuilder(ms.builder.PyBuilder):
    """Builds each batch on a pool of worker processes made once, one per core (as
    LocalBuilder); a build that takes over `timeout_sec` fails. `close()` ends the workers and
    deletes the candidates' libraries (each in a temporary directory of its own)."""

    def __init__(self, timeout_sec: float = 30.0):
        super().__init__()
        self.timeout_sec = timeout_sec
        self.pool = PopenPoolExecutor(max_workers=os.cpu_count() or 1, timeout=timeout_sec,
                                      maximum_process_uses=MAX_BUILDS_PER_WORKER)  # fmt: skip
        self.function = _build_and_export()
        self.artifacts = []  # the temporary directories of the libraries built

    def build(self, build_inputs):
        if any(b.params is not None and len(b.params) for b in build_inputs):
            raise ValueError("tftvm's tuning builder takes no params: kernels get their weights as inputs")
        results = []
        for result in self.pool.map_with_error_catching(self.function, [(b.mod, b.target) for b in build_inputs]):
            if result.status == StatusKind.COMPLETE:
                self.artifacts.append(os.path.dirname(result.value))
                results.append(ms.builder.BuilderResult(result.value, None))
            elif result.status == StatusKind.TIMEOUT:
                results.append(ms.builder.BuilderResult(None, f"timed out after {self.timeout_sec} s"))
            else:
                results.append(ms.builder.BuilderResult(None, f"build failed: {result.value}"))
        return results

    def close(self) -> None:
        self.pool.shutdown()
        for path in self.artifacts:
            shutil.rmtree(path, ignore_errors=True)
        self.artifacts.clear()
