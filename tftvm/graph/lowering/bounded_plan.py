"""A second entry of a program with `None` dims: the same kernels, its memory planned for
those dims up to UPPER_BOUND.

Relax's memory planner (StaticPlanBlockMemory) lets two tensors share storage only where
their sizes are provably equal. With a `None` batch every size is n x a constant, so almost
no two are, and each call allocates one buffer per intermediate tensor: 50 buffers, about
200 MB, for EfficientNetB0 at batch 8, against 8 (68 MB) for its static program, and each
kernel then writes memory that no cache holds. Given an upper bound for n
("tir_var_upper_bound"), the planner sizes storage for it and reuses it as in a static program.
A call whose `None` dims all fit the bound runs BOUNDED_ENTRY; a larger one runs "main",
planned as before. Storage is sized for the bound but only the part a call uses is touched
(memory pages are committed on first touch).
"""
from __future__ import annotations

BOUNDED_ENTRY = "main_bounded"
UPPER_BOUND = 32  # the largest value of each `None` dim that BOUNDED_ENTRY runs


def with_bounded_entry(mod):
    """`mod` with BOUNDED_ENTRY, a copy of its Relax "main" whose signature's symbolic vars are
    bounded by UPPER_BOUND for memory planning; `mod` itself where "main" has none. Added after
    fusion, the copy calls the same kernels (they are compiled once)."""
    from tvm import relax, tirx
    from tvm.relax.utils import copy_with_new_vars

    main = mod["main"]
    names = sorted({v.name for p in main.params for v in relax.analysis.definable_tir_vars_in_type(p.ty)
                    if isinstance(v, tirx.Var)})  # fmt: skip
    if not names:
        return mod
    bounded = copy_with_new_vars(main).with_attr("tir_var_upper_bound", {n: UPPER_BOUND for n in names})
    mod[BOUNDED_ENTRY] = bounded.with_attr("global_symbol", BOUNDED_ENTRY)
    return mod


def fits(shapes, specs) -> bool:
    """Whether each dim of `shapes` that `specs` (a TensorSpec per input) leaves `None` is at
    most UPPER_BOUND."""
    return all(d <= UPPER_BOUND for shape, spec in zip(shapes, specs)
               for d, s in zip(shape, spec.shape.as_list()) if s is None)  # fmt: skip
