"""log and pow of float32 and float64 read a denormal operand as zero, as TF's kernels do.

TF runs its kernels with the CPU's denormals-are-zero flag, which TVM's kernels share when
they run in TF's threads: a vector sqrt of -1e-40 gives -0 in both. libm's logf and powf
read the float's bits instead, which the flag does not reach, so log(1e-40) came out
-103.97, log(-1e-40) NaN and pow(inf, -1e-40) 0, where TF gives -inf, -inf and 1. The
operands are flushed first (a compare and a select per element, in the libm call's loop).
"""
from __future__ import annotations

from .fast_math import first_dtype, legalization


def legalize_map() -> dict:
    """For LegalizeOps' customize_legalize_map."""
    from tvm import te, tirx, topi

    def flushed(x):
        import numpy as np

        tiny = tirx.const(float(np.finfo(str(x.dtype)).tiny), str(x.dtype))
        zero = tirx.const(0.0, str(x.dtype))

        def element(*i):
            v = x(*i)
            return tirx.Select(tirx.abs(v) < tiny, tirx.copysign(zero, v), v)  # a NaN stays

        return te.compute(x.shape, element, name="flushed")

    def log(x):
        return topi.log(flushed(x))

    def power(x, y):
        return topi.power(flushed(x), flushed(y))

    def applies(call):
        return first_dtype(call) in ("float32", "float64")

    return {"relax.log": legalization("relax.log", applies, log, lambda call: [call.args[0]]),
            "relax.power": legalization("relax.power", applies, power, lambda call: list(call.args))}  # fmt: skip
