"""A reduction along one axis, kept as a dim of 1, in the form the schedule vectorizes.

The schedule vectorizes a reduction along contiguous memory only by a width that divides its
extent (schedule/rules/dot_products.py), and a row of 50257 logits (GPT-2's vocabulary) has
none, so it ran scalar. Along a static last axis that VECTOR does not divide, the row is
reduced in two parts, the first multiple of VECTOR elements (vectorized) and the rest (a few
scalar steps), and the two results combined.
"""
from __future__ import annotations

VECTOR = 16  # float32 lanes of AVX-512; a multiple of AVX2's 8 and of the 4 the rule also takes


def row_reduce(x, axis: int, reducer, combine, name: str, value=None):
    """`reducer` (a te comm_reducer: te.max, te.sum, ...) of `x` along `axis`, kept as a dim
    of 1; `combine(a, b)` merges two partial results, as the reducer's own combiner does.
    `value(*index)` is what is reduced at an index of `x` (default: `x` there): an expression
    of `x` there stays in the reduction's loop, where a stage of its own would be written to
    memory and read back."""
    from tvm import te, tirx

    rank = len(x.shape)
    axis %= rank
    n = x.shape[axis]
    split = axis == rank - 1 and isinstance(n, tirx.IntImm) and int(n) % VECTOR and int(n) >= 2 * VECTOR
    bounds = [(0, int(n) - int(n) % VECTOR), (int(n) - int(n) % VECTOR, int(n))] if split else [(0, n)]
    shape = [1 if a == axis else d for a, d in enumerate(x.shape)]

    def part(low, high, label):
        k = te.reduce_axis((low, high), name=f"k_{label}")

        def element(*i):
            return reducer((value or x)(*i[:axis], k, *i[axis + 1 :]), axis=k)

        return te.compute(shape, element, name=f"{name}_{label}")

    parts = [part(low, high, label) for (low, high), label in zip(bounds, ("head", "tail"))]
    if len(parts) == 1:
        return parts[0]
    head, tail = parts
    return te.compute(shape, lambda *i: combine(head(*i), tail(*i)), name=name)
