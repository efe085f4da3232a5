"""argmax and argmin of floats legalized as TF's CPU kernels compute them, in two reductions
that vectorize.

TF's ArgMax/ArgMin skip NaNs (a row's NaN is never its max), give the first index of a tie,
and 0 for a row of NaNs. TVM's legalization is one reduction over (index, value) pairs, which
the schedule cannot vectorize: a greedy sampler's argmax over GPT-2's 50257 logits ran scalar.
Here the row's extreme value, NaNs skipped, is one reduction, and the first index holding it
(the least index whose value equals it) a second; both vectorize (row_reduce.py).
"""
from __future__ import annotations

from functools import partial

from .fast_math import first_dtype, legalization
from .row_reduce import row_reduce


def legalize_map() -> dict:
    """For LegalizeOps' customize_legalize_map: floats along one axis (TF's ArgMax has one)."""
    def applies(call):
        return "float" in first_dtype(call) and call.attrs.axis is not None

    def arguments(call):
        return [call.args[0], int(call.attrs.axis), bool(call.attrs.keepdims)]

    return {"relax.argmax": legalization("relax.argmax", applies, partial(_first_index_of_extreme, larger=True), arguments),
            "relax.argmin": legalization("relax.argmin", applies, partial(_first_index_of_extreme, larger=False), arguments)}  # fmt: skip


def _first_index_of_extreme(x, axis: int, keepdims: bool, larger: bool):
    from tvm import te, tirx

    axis %= len(x.shape)
    worst = tirx.const(float("-inf") if larger else float("inf"), x.dtype)
    # A NaN compares false, so it becomes the worst value; -inf itself passes. rfactor knows
    # max and min, and vectorizes them, where it refuses a combiner of its own.
    def nan_skipped(*i):
        return tirx.Select(x(*i) >= worst if larger else x(*i) <= worst, x(*i), worst)

    extreme = row_reduce(x, axis, te.max if larger else te.min, tirx.max if larger else tirx.min,
                         "arg_extreme_value", nan_skipped)  # fmt: skip
    # Indices in int64, the loops' own dtype: an int32 index cast from an int64 loop variable
    # becomes an int64 min cast back, which rfactor no longer recognizes.
    none = tirx.Cast("int64", x.shape[axis])  # past the row: no element holds the extreme (all NaN)

    def candidate(*i):  # its index where an element holds the extreme, else past the row
        holds = x(*i) == extreme(*i[:axis], 0, *i[axis + 1 :])
        return tirx.Select(holds, tirx.Cast("int64", i[axis]), none)

    first = row_reduce(x, axis, te.min, tirx.min, "arg_first", candidate)
    shape = [d for a, d in enumerate(x.shape) if a != axis]

    def element(*i):
        j = (*i[:axis], 0, *i[axis + 1 :]) if keepdims else (*i[:axis], 0, *i[axis:])
        found = first(*j)
        return tirx.Select(found == none, tirx.const(0, "int64"), found)

    return te.compute(first.shape if keepdims else shape, element, name="arg_extreme")
