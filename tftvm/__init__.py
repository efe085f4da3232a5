"""tftvm: TVM-compiled kernels as TensorFlow ops."""
import os as _os

# TVM's thread pool must not pin TF's threads to cores, and may use up to every
# core: the kernel then sizes it to TF's intra-op thread count.
_os.environ.setdefault("TVM_BIND_THREADS", "0")
_os.environ.setdefault("TVM_NUM_THREADS", str(_os.cpu_count() or 1))
# After each parallel job TVM's workers yield 300000 times before they sleep (its default), and
# every TF thread that runs a TvmCall has a pool of its own: the spinning takes the cores from
# TF's next op and from the other pools (benchmarks/HISTORY.md has the measurements).
_os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "1000")

from .check import CheckReport, check  # noqa: E402
from .codegen import codegen  # noqa: E402
from .compiled_model import CompiledModel, compile_model, load_model  # noqa: E402
from .enable_pass import disable, enable, enabled, enabled_report, is_enabled  # noqa: E402
from .graph.optimize import optimize  # noqa: E402
from .kernel import Kernel  # noqa: E402
from .op import TvmOp, load_op, op  # noqa: E402
from .saved_model import load_saved_model  # noqa: E402
from .shape_dispatch import ShapeDispatchOp  # noqa: E402
from .signature import Signature, TensorSig  # noqa: E402
from .trust import allow_embedded_modules, embedded_modules_allowed  # noqa: E402
from .tune import tune  # noqa: E402

from .version import __version__  # noqa: E402

# Register the TvmCall op now, so graphs and SavedModels that use it load after
# `import tftvm` alone. A failure is reported again, with details, on first use.
try:
    from . import native as _native

    _native.load()
    from .cpu.features import request_amx as _request_amx

    _request_amx()  # a graph loaded from a SavedModel may hold AMX kernels (cpu/features.py)
    from .enable_pass import enable_from_environment as _enable_from_environment

    _enable_from_environment()
except Exception as _err:  # noqa: BLE001  import must not fail: `tftvm doctor` explains
    import logging as _logging

    _logging.getLogger(__name__).warning("tftvm bridge library unavailable: %s", _err)
__all__ = ["CheckReport", "CompiledModel", "Kernel", "check", "allow_embedded_modules", "codegen", "compile_model", "disable", "enable", "enabled", "enabled_report", "is_enabled", "load_model", "embedded_modules_allowed", "ShapeDispatchOp", "Signature", "TensorSig", "TvmOp", "load_op", "load_saved_model", "op", "optimize", "tune"]
