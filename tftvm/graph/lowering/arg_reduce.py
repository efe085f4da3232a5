"""argmax and argmin of floats legalized as TF's CPU kernels compute them, in two reductions
that vectorize.

TF's ArgMax/ArgMin skip NaNs (a row's NaN is never its max), give the first index of a tie,
and 0 for a row of NaNs. TVM's legalization is one reduction over (index, value) pairs, which
the schedule cannot vectorize: a greedy sampler's argmax over GPT-2's 50257 logits ran scalar.
Here the row's extreme value, NaNs skipped, is one reduction, and the first index holding it
(the least index whose value equals it) a second; both vectorize (row_reduce.py).
"""
from __future__ import annotations

from .row_reduce import row_reduce


def legalize_map() -> dict:
    """For LegalizeOps' customize_legalize_map."""
    return {"relax.argmax": _legalize(larger=True), "relax.argmin": _legalize(larger=False)}


def _legalize(larger: bool):
    import tvm

    name = "relax.argmax" if larger else "relax.argmin"
    default = tvm.ir.Op.get(name).get_attr("FLegalize")

    def legalize(bb, call):
        x = call.args[0]
        if not str(x.ty.dtype).startswith(("float", "bfloat")) or call.attrs.axis is None:
            return default(bb, call)
        axis, keepdims = int(call.attrs.axis), bool(call.attrs.keepdims)
        return bb.call_te(lambda t: _arg_extreme(t, axis, keepdims, larger), x, primfunc_name_hint=name[6:])

    return legalize


def _arg_extreme(x, axis: int, keepdims: bool, larger: bool):
    from tvm import te, tirx

    rank = len(x.shape)
    axis %= rank
    dtype = x.dtype
    worst = tirx.const(float("-inf") if larger else float("inf"), dtype)
    # A NaN compares false, so it becomes the worst value; -inf itself passes. rfactor knows
    # max and min, and vectorizes them, where it refuses a combiner of its own.
    def nan_skipped(*i):
        return tirx.Select(x(*i) >= worst if larger else x(*i) <= worst, x(*i), worst)

    extreme = row_reduce(x, axis, te.max if larger else te.min, tirx.max if larger else tirx.min,
                         "arg_extreme_value", nan_skipped)  # fmt: skip
    n = x.shape[axis]
    # The loops' own dtype: an int32 index cast from an int64 loop variable becomes an int64
    # min cast back, which rfactor no longer recognizes.
    index_dtype = "int64"
    none = tirx.Cast(index_dtype, n)  # past the row: no element holds the extreme (all NaN)

    def candidate(*i):  # its index where an element holds the extreme, else past the row
        holds = x(*i) == extreme(*i[:axis], 0, *i[axis + 1 :])
        return tirx.Select(holds, tirx.Cast(index_dtype, i[axis]), none)

    first = row_reduce(x, axis, te.min, tirx.min, "arg_first", candidate)
    shape = [d for a, d in enumerate(x.shape) if a != axis]

    def element(*i):
        j = (*i[:axis], 0, *i[axis + 1 :]) if keepdims else (*i[:axis], 0, *i[axis:])
        found = first(*j)
        return tirx.Cast("int64", tirx.Select(found == none, tirx.const(0, index_dtype), found))

    return te.compute(first.shape if keepdims else shape, element, name="arg_extreme")
