"""A TE reduction over some axes of a tensor, as Relax's reductions take them."""
from __future__ import annotations


def over_axes(x, axis, keepdims: bool, reducer, name: str):
    """`reducer` (a te comm_reducer) of `x` over `axis` (a list of ints, None for all), the
    reduced axes kept as dims of 1 where `keepdims`."""
    from tvm import te

    rank = len(x.shape)
    reduced = sorted({a % rank for a in axis}) if axis is not None else list(range(rank))
    over = [te.reduce_axis((0, x.shape[a]), name=f"k{a}") for a in reduced]
    kept = [a for a in range(rank) if a not in reduced]
    shape = [1 if a in reduced else x.shape[a] for a in range(rank)] if keepdims else [x.shape[a] for a in kept]

    def element(*index):
        at = list(index) if keepdims else [None] * rank
        if not keepdims:
            for a, i in zip(kept, index):
                at[a] = i
        for a, k in zip(reduced, over):
            at[a] = k
        return reducer(x(*at), axis=over)

    return te.compute(shape, element, name=name)
