"""max, min, ReLU, clip, sign and the Max/Min reductions of floats legalized to pass NaNs on,
as TF's kernels do; != of floats, and == of two computed ones, decided by isnan for a NaN.

TVM lowers max(a, b) to `a > b ? a : b`, so ReLU(NaN) came out 0, ReLU6(NaN) 6,
maximum(0, NaN) 0, sign(NaN) 0 and a row's max skipped its NaN: a model whose input or weights held a NaN
gave finite, wrong numbers where TF gives NaN. Each op stays one kernel, as TVM's own: a
Relax-level `where(isnan(x), x, relu(x))` would give x three consumers, and a matmul, a
reshape and its ReLU would no longer fuse.
"""
from __future__ import annotations

from .reduce_axes import over_axes


def legalize_map() -> dict:
    """For LegalizeOps' customize_legalize_map."""
    from tvm import tirx, topi

    # Ordered comparisons are false for a NaN, so each select below falls through to it; a
    # NaN in either operand of max/min makes both false and gives a + b, a NaN. (tirx.isnan
    # is no vector op, so a loop using it stays scalar; v != v is simplified away.)
    def relu(x):
        def element(v):
            zero = tirx.const(0, v.ty.dtype)
            return tirx.Select(v < zero, zero, v)

        return _elementwise(x.shape, [x], element)

    def clip(x, low, high):
        def element(v):
            low_, high_ = (tirx.Cast(v.ty.dtype, b) if b.ty.dtype != v.ty.dtype else b for b in (low, high))
            return tirx.Select(v < low_, low_, tirx.Select(v > high_, high_, v))

        return _elementwise(x.shape, [x], element)

    def sign(x):
        def element(v):
            one, zero = tirx.const(1, v.ty.dtype), tirx.const(0, v.ty.dtype)
            return tirx.Select(v > zero, one, tirx.Select(v < zero, -one, v))  # 0, -0, NaN as they are

        return _elementwise(x.shape, [x], element)

    def maximum(a, b):
        return _elementwise(topi.maximum(a, b).shape, [a, b], _larger)

    def minimum(a, b):
        return _elementwise(topi.minimum(a, b).shape, [a, b], _smaller)

    def not_equal(a, b):
        return _elementwise(topi.not_equal(a, b).shape, [a, b], _unordered_or(lambda u, v: u != v, True))

    def equal(a, b):
        return _elementwise(topi.equal(a, b).shape, [a, b], _unordered_or(lambda u, v: u == v, False))

    computes = {"relax.nn.relu": relu, "relax.clip": clip, "relax.sign": sign, "relax.maximum": maximum,
                "relax.minimum": minimum}
    reductions = {"relax.max": _reduction(larger=True), "relax.min": _reduction(larger=False)}
    # != of floats: TVM emits LLVM's ordered `fcmp one`, false for a NaN (x != 2.0 was false
    # at NaN; TF: true). == of two computed floats: fused, the simplifier rewrites it by
    # integer rules (abs(x) == x became x >= 0, true for a NaN). A NaN operand now decides
    # through isnan, which neither touches; == against a constant keeps IEEE's own answer.
    return {**{name: _floats_only(name, compute) for name, compute in computes.items()},
            **{name: _floats_only(name, compute, reduction=True) for name, compute in reductions.items()},
            "relax.not_equal": _floats_only("relax.not_equal", not_equal),
            "relax.equal": _floats_only("relax.equal", equal, computed=True)}  # fmt: skip


def _larger(u, v):
    from tvm import tirx

    return tirx.Select(u < v, v, tirx.Select(v <= u, u, u + v))


def _smaller(u, v):
    from tvm import tirx

    return tirx.Select(v < u, v, tirx.Select(u <= v, u, u + v))


def _elementwise(shape, operands, fn):
    """fn of the operands' elements, broadcast to `shape`."""
    from tvm import te

    return te.compute(shape, lambda *index: fn(*[x(*_broadcast_index(x, shape, index)) for x in operands]),
                      name="nan_passing")  # fmt: skip


def _reduction(larger: bool):
    """max (or min) over axes whose result is NaN where a reduced row holds a NaN: the
    combiner is the elementwise max's (a NaN wins), its identity -inf (or inf)."""
    from tvm import te, tirx

    def identity(dtype):
        return tirx.const(float("-inf") if larger else float("inf"), dtype)

    name = "nan_max" if larger else "nan_min"
    reducer = te.comm_reducer(_larger if larger else _smaller, identity, name=name)
    return lambda x, axis, keepdims: over_axes(x, axis, keepdims, reducer, name)


def _broadcast_index(x, shape, index):
    """The index of `x` that the element at `index` of the broadcast `shape` reads. An axis of
    1 in both reads the loop variable, not 0: a kernel whose every read is at its own index is
    elementwise to FuseOps, and a ReLU of a static batch of 1 then fuses into the conv before
    it (read at 0, it was a broadcast, left as a pass of its own)."""
    from tvm import tirx

    offset = len(shape) - len(x.shape)
    return tuple(tirx.const(0, index[offset + i].ty.dtype) if _is_one(dim) and not _is_one(shape[offset + i])
                 else index[offset + i] for i, dim in enumerate(x.shape))  # fmt: skip


def _is_one(dim) -> bool:
    from tvm import tirx

    return isinstance(dim, tirx.IntImm) and int(dim) == 1


def _unordered_or(compare, if_nan: bool):
    """compare(u, v), or `if_nan` where u or v is a NaN."""
    from tvm import tirx

    def element(u, v):
        return tirx.Select(tirx.Or(tirx.isnan(u), tirx.isnan(v)), tirx.const(if_nan, "bool"), compare(u, v))

    return element


def _floats_only(name: str, compute, reduction: bool = False, computed: bool = False):
    """`computed`: only where no operand is a constant."""
    from tvm.ir.expr import Constant

    from .fast_math import first_dtype, legalization

    def arguments(call):
        if not reduction:
            return list(call.args)
        axis = None if call.attrs.axis is None else [int(a) for a in call.attrs.axis]
        return [call.args[0], axis, bool(call.attrs.keepdims)]

    def applies(call):
        constant = computed and any(isinstance(a, Constant) for a in call.args)
        return "float" in first_dtype(call) and not constant

    return legalization(name, applies, compute, arguments)
