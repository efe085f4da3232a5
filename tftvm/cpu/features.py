"""Which matrix instructions a target has, and the process permission AMX needs.

The kernels in this package run only where the target's CPU has the instructions they use;
LLVM knows each CPU model's features (`llvm_cpu_has_features`), so a target dict with an
`mcpu` (tftvm's default: this host's) says it. Linux hands out the AMX tile registers only
to a process that asks for them (arch_prctl ARCH_REQ_XCOMP_PERM), and a tile instruction in
a process that has not asked dies of SIGILL: `request_amx()` asks, once per process, when
tftvm loads (a SavedModel with AMX kernels may be run in a fresh process).
"""
from __future__ import annotations

import ctypes
import functools
import logging
import platform

log = logging.getLogger(__name__)

_SYS_ARCH_PRCTL = 158  # x86-64
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18


def has_features(target, names: list[str]) -> bool:
    """Does `target` (a tvm.target.Target or None for this host) have every LLVM feature in `names`?"""
    import tvm
    from tvm.target import codegen

    if target is None:
        target = tvm.target.Target({"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu()})
    if target.kind.name != "llvm" or "x86_64" not in str(target.attrs.get("mtriple") or _host_triple()):
        return False
    try:
        return bool(codegen.llvm_cpu_has_features(names, target))
    except Exception:  # an mcpu LLVM does not know: it cannot say the CPU has them
        return False


def amx_bf16(target) -> bool:
    """Can kernels for `target` use AMX's bf16 tiles (Intel Sapphire Rapids and later), and may
    this process use them?"""
    return has_features(target, ["amx-tile", "amx-bf16"]) and request_amx()


def avx512_bf16(target) -> bool:
    """Can kernels for `target` use AVX512-BF16's VDPBF16PS (AMD Zen 4 and later, Intel Cooper
    Lake and Sapphire Rapids and later)?"""
    return has_features(target, ["avx512bf16"])


@functools.cache
def request_amx() -> bool:
    """Ask Linux for the AMX tile data state for this process; True once granted."""
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    granted = libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0
    if not granted:
        log.debug("AMX tile data not granted (errno %d): no AMX kernels", ctypes.get_errno())
    return granted


@functools.cache
def _host_triple() -> str:
    from tvm.target import codegen

    return codegen.llvm_get_system_triple()
