"""What `tftvm.tune` needs of what it tunes: one method, `tuning(shapes) -> Tuning`.

Every tunable tftvm result (an op, a `ShapeDispatchOp`, a `tftvm.optimize` result with or
without an input signature, a `tftvm.compile_model` result) says through `tuning(shapes)`
which kernels to tune, the target they were compiled for, how to rebuild it with the tuned
records, and what `tune` returns when none of its kernels can be tuned. `tune` knows no kind
of result by name; a new kind becomes tunable by having the method.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from .signature import symbolic_reason


@dataclasses.dataclass
class Tuning:
    kernels: list  # (name, PrimFunc, the kernel's own schedule function or None)
    target: object  # the TVM target the kernels were compiled for: records are measured on it
    rebuild: Callable  # rebuild(database=path) -> the result with the tuned schedules
    result: object  # what `tune` returns where no kernel can be tuned


def of_ops(ops, rebuild, result, *, alone: bool = False) -> Tuning:
    """The Tuning of tftvm ops. `alone`: a single op asked for, so symbolic dims are an error
    (which says to give shapes=) instead of a kernel skipped."""
    kernels = []
    for op in ops:
        if op.prim_func is None:
            raise TypeError(f"tftvm op '{op.name}' was loaded from a library: it has no TVM IR to tune")
        why = symbolic_reason(op.prim_func)
        if why is not None and alone:
            raise ValueError(f"tftvm op '{op.name}' cannot be tuned as it is: {why}; MetaSchedule measures "
                             "concrete shapes: give shapes=[[one shape per input], ...] to tune static "
                             "variants at them")  # fmt: skip
        schedule = op.compile_options.get("schedule")
        kernels.append((op.name, op.prim_func, schedule if callable(schedule) else None))
    return Tuning(kernels, _target_of(ops) if ops else None, rebuild, result)


def no_shapes(shapes) -> None:
    """shapes= is for what has symbolic kernels to specialize: an op and a compile_model result."""
    if shapes is not None:
        raise TypeError("shapes= is for an op and a tftvm.compile_model result; an optimize result is tuned "
                        "at the shapes it was built for")  # fmt: skip


def _target_of(ops):
    """The one target the ops were compiled for."""
    from .kernel import resolve_target

    targets = {str(resolve_target(o.compile_options.get("target"))) for o in ops}
    if len(targets) > 1:
        raise ValueError(f"the ops were built for different targets {sorted(targets)}; tune them apart")
    return resolve_target(ops[0].compile_options.get("target"))
