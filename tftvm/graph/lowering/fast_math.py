"""exp, sigmoid, tanh, softmax and log_softmax of float32 legalized with TVM's vectorizable
approximations.

TVM's default legalization calls the C library per element (LLVM has no vector
exp here), several times slower than TF's kernels. TOPI's fast_exp (range reduction and a
polynomial) and fast_tanh (the rational approximation Eigen, and so TF, uses) vectorize,
with a relative error within twice TF's (tests/test_fast_math.py). erf is
TOPI's fast_erf (Eigen's rational approximation, clamped to [-4, 4]) with NaN put back where
the clamp turned it into +-1; the schedule inlines that select into the polynomial's loop,
which stays vectorized. softmax and
log_softmax are TOPI's with fast_exp (TOPI's call the C library's exp: an encoder's
attention probabilities are seq x seq per head). Other dtypes keep TVM's legalization.
"""
from __future__ import annotations

from .row_reduce import row_reduce


def legalize_map() -> dict:
    """For LegalizeOps' customize_legalize_map."""
    from tvm import te, tirx, topi

    def row_max(x, axis):
        return row_reduce(x, axis, te.max, tirx.max, "row_max")

    def row_sum(x, axis):
        return row_reduce(x, axis, te.sum, lambda a, b: a + b, "row_sum")

    def exp(x):
        # fast_exp gives inf from x = 88.38 on, where exp(x) is still a float32 up to 88.72: its
        # half, squared, does not (2.5 ulp at most, where TF's is 1).
        return topi.multiply(half := topi.fast_exp(topi.multiply(x, 0.5)), half)

    def sigmoid(x):
        exp = topi.fast_exp(topi.negative(x))
        return topi.divide(1.0, topi.add(1.0, exp))  # exp = inf for x < -88.38: 1 / inf = 0

    def shifted(x, axis):  # x - max <= 0: its exp cannot overflow; a NaN stays a NaN through fast_exp and sums
        return topi.subtract(x, row_max(x, axis))

    def softmax(x, axis):
        e = topi.fast_exp(shifted(x, axis))
        return topi.divide(e, row_sum(e, axis))

    def log_softmax(x, axis):
        s = shifted(x, axis)
        return topi.subtract(s, topi.log(row_sum(topi.fast_exp(s), axis)))

    def erf(x):
        from tvm import te, tirx

        clamped = topi.fast_erf(x)  # NaN -> +-1 in its clamp

        def element(*i):
            # Near 0, erf(x) is x * 2/sqrt(pi) to a few 1e-9: the rational form's first product
            # (x * 0.016) is denormal below |x| ~ 7e-37, which TF's threads flush, and erf was 0
            v = x(*i)
            small = tirx.Select(tirx.abs(v) < tirx.const(1e-4, "float32"), v * tirx.const(1.1283791670955126, "float32"),
                                clamped(*i))  # fmt: skip
            return tirx.Select(tirx.isnan(v), v, small)

        return te.compute(x.shape, element, name="erf")

    def tanh(x):
        from tvm import te, tirx

        rational = topi.fast_tanh(x)
        # TF's tanh is x itself for |x| < 3.5e-4 (measured); the rational form is an ulp off there,
        # and tanh(x) compared with x then differed from TF's answer (found by the graph fuzzer)
        # (a denormal x, which the threads read as 0, keeps the rational form's 0)
        def element(*i):
            size = tirx.abs(x(*i))
            tiny = tirx.And(size < tirx.const(3.5e-4, "float32"), size >= tirx.const(1.1754943508222875e-38, "float32"))
            return tirx.Select(tiny, x(*i), rational(*i))

        return te.compute(x.shape, element, name="tanh")

    fast = {"relax.exp": exp, "relax.tanh": tanh, "relax.sigmoid": sigmoid, "relax.erf": erf}
    along_axis = {"relax.nn.softmax": softmax, "relax.nn.log_softmax": log_softmax}  # one log per row: libm's
    return {**{name: _float32_only(name, compute) for name, compute in fast.items()},
            **{name: _float32_only(name, compute, axis=True) for name, compute in along_axis.items()}}  # fmt: skip


def _float32_only(name: str, compute, axis: bool = False):
    def arguments(call):
        return [call.args[0], int(call.attrs.axis)] if axis else [call.args[0]]

    return legalization(name, lambda call: first_dtype(call) == "float32", compute, arguments)


def first_dtype(call) -> str:
    return str(call.args[0].ty.dtype)


def legalization(name: str, applies, compute, arguments):
    """A LegalizeOps function for op `name`: `compute` (TE) on `arguments(call)` where
    `applies(call)` (to the dtype of its first argument, say), TVM's own legalization elsewhere."""
    import tvm

    default = tvm.ir.Op.get(name).get_attr("FLegalize")
    hint = name.split(".")[-1]

    def legalize(bb, call):
        if not applies(call):
            return default(bb, call)
        return bb.call_te(compute, *arguments(call), primfunc_name_hint=hint)

    return legalize
