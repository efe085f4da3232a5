"""x - x of floats as IEEE gives it, whatever kernel it fuses into.

Fused into one kernel, both operands become the same expression, and TVM's simplifier folds
x - x to 0 by the rule it has for ints: a NaN or an infinity (exp(x) - exp(x) of an infinite
x is NaN in TF) no longer shows. Identical bindings are merged first (Relax's common
subexpression elimination: TF's graph keeps `exp(x)` twice), then each such subtraction is
written out as where(isfinite(x), 0, NaN); isfinite is an intrinsic the simplifier does not
see through. (x == x and x != x, folded the same way, are decided by isnan where nans.py
legalizes float comparisons.)
"""
from __future__ import annotations


def rewrite(mod):
    """`mod` with identical bindings merged and each float x - x written out."""
    import tvm
    from tvm import relax

    mod = relax.transform.EliminateCommonSubexpr()(mod)
    if not any(_calls(func) for func in mod.functions.values() if isinstance(func, relax.Function)):
        return mod
    mod = mod.clone()
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function) and _calls(func):
            mod[gv] = _writer()(mod).visit_expr(func)
    return tvm.transform.Sequential([relax.transform.DeadCodeElimination(), relax.transform.Normalize()])(mod)


def _is_self_difference(call) -> bool:
    from tvm import relax

    return (isinstance(call, relax.Call) and getattr(call.op, "name", "") == "relax.subtract"
            and call.args[0].same_as(call.args[1])
            and str(call.args[0].ty.dtype).startswith(("float", "bfloat")))  # fmt: skip


def _calls(func) -> bool:
    from tvm import relax

    found = []
    relax.analysis.post_order_visit(func, lambda e: found.append(e) if _is_self_difference(e) else None)
    return bool(found)


def _writer():
    """The mutator class (made here: TVM is imported only when a graph is lowered)."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Writer(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not _is_self_difference(call):
                return call
            x, op, dtype = call.args[0], relax.op, str(call.args[0].ty.dtype)
            return op.where(op.isfinite(x), relax.const(0, dtype), relax.const(float("nan"), dtype))

    return Writer
