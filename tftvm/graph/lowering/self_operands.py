"""x - x, x == x and x != x of floats as IEEE gives them, whatever kernel they fuse into.

Fused into one kernel, both operands become the same expression, and TVM's simplifier folds
them with the rules it has for ints: x - x to 0, x == x to true, x != x to false. A NaN (or
an infinity, for x - x) then no longer shows: `tf.not_equal(x, x)` is how code finds NaNs,
and exp(x) - exp(x) of an infinite x is NaN in TF. Identical bindings are merged first
(Relax's common subexpression elimination: TF's graph keeps `exp(x)` twice), then each
such call is written out: x - x as where(isfinite(x), 0, NaN), x != x as isnan(x), x == x
as not isnan(x). isnan and isfinite are intrinsics the simplifier does not see through.
"""
from __future__ import annotations

OPS = frozenset({"relax.subtract", "relax.equal", "relax.not_equal"})


def rewrite(mod):
    """`mod` with identical bindings merged and each float x - x, x == x, x != x written out."""
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


def _is_self_call(call) -> bool:
    from tvm import relax

    return (isinstance(call, relax.Call) and getattr(call.op, "name", "") in OPS and len(call.args) == 2
            and call.args[0].same_as(call.args[1])
            and str(call.args[0].ty.dtype).startswith(("float", "bfloat")))  # fmt: skip


def _calls(func) -> bool:
    from tvm import relax

    found = []
    relax.analysis.post_order_visit(func, lambda e: found.append(e) if _is_self_call(e) else None)
    return bool(found)


def _writer():
    """The mutator class (made here: TVM is imported only when a graph is lowered)."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Writer(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not _is_self_call(call):
                return call
            x, op = call.args[0], relax.op
            if call.op.name == "relax.not_equal":
                return op.isnan(x)
            if call.op.name == "relax.equal":
                return op.logical_not(op.isnan(x))
            dtype = str(x.ty.dtype)
            return op.where(op.isfinite(x), relax.const(0, dtype), relax.const(float("nan"), dtype))

    return Writer
