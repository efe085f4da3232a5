"""Whether graphs may bring their own native code: the embedded-module policy.

A TvmCall node in a graph or SavedModel carries its compiled TVM library, so
loading such a model runs native code from the file, as any custom-op model
does. Processes that serve models they did not build can refuse that code:
then only modules this process compiled or loaded itself (tftvm.op,
tftvm.load_op) run, and a node that needs its embedded module fails with
PermissionDenied.
"""
from __future__ import annotations

ENV = "TFTVM_ALLOW_EMBEDDED_MODULES"  # 0/false/no/off: refuse embedded modules from the start


def allow_embedded_modules(allowed: bool) -> None:
    """Allow (True, the default) or refuse (False) module bytes embedded in graphs, process-wide."""
    import tvm_ffi

    from . import native

    if not isinstance(allowed, bool):
        raise TypeError(f"allowed must be True or False, got {allowed!r}")
    native.load()
    tvm_ffi.get_global_func("tftvm.allow_embedded_modules")(allowed)


def embedded_modules_allowed() -> bool:
    import tvm_ffi

    from . import native

    native.load()
    return bool(tvm_ffi.get_global_func("tftvm.embedded_modules_allowed")())
