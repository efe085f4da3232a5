"""Float arithmetic that TVM's simplifier would fold by rules true only for ints, written out
so that it cannot.

Two kinds:
- x - x. Fused into one kernel, both operands become the same expression, and the
  simplifier folds x - x to 0: a NaN or an infinity (exp(x) - exp(x) of an infinite x is
  NaN in TF) no longer shows. Identical bindings are merged first (Relax's common
  subexpression elimination: TF's graph keeps `exp(x)` twice), then each such subtraction is
  written out as where(isfinite(x), 0, NaN); isfinite is an intrinsic the simplifier does not
  see through. (x == x and x != x, folded the same way, are decided by isnan where nans.py
  legalizes float comparisons.)
- Arithmetic with a scalar constant zero. LegalizeOps makes a 0-d constant an immediate, and
  the simplifier then folds x * 0 and 0 / x to 0 (TF: NaN for an infinite or NaN x, -0 for a
  negative one), x + 0 and x - (-0) to x (TF: +0 for x = -0), and stops at x / 0 with "Divide
  by zero" (TF: an infinity or NaN). Such a zero becomes a constant of shape (1, ..., 1) of
  the result's rank, a buffer the simplifier cannot read.
"""
from __future__ import annotations

# Relax ops whose legalized TIR TVM's constant folding simplifies with a zero operand.
_ZERO_FOLDED = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.floor_divide",
                "relax.floor_mod")  # fmt: skip


def rewrite(mod):
    """`mod` with identical bindings merged, each float x - x written out and each scalar
    zero constant of float arithmetic made a one-element tensor."""
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


def _is_float(expr) -> bool:
    dtype = getattr(getattr(expr, "ty", None), "dtype", "")
    return str(dtype).startswith(("float", "bfloat"))


def _is_self_difference(call) -> bool:
    from tvm import relax

    return (isinstance(call, relax.Call) and getattr(call.op, "name", "") == "relax.subtract"
            and call.args[0].same_as(call.args[1]) and _is_float(call.args[0]))  # fmt: skip


def _is_scalar_zero(expr) -> bool:
    from tvm.ir.expr import GenericConst

    return (isinstance(expr, GenericConst) and len(expr.value.shape) == 0 and _is_float(expr)
            and float(expr.value.numpy()) == 0.0)  # fmt: skip


def _has_zero_operand(call) -> bool:
    from tvm import relax

    return (isinstance(call, relax.Call) and getattr(call.op, "name", "") in _ZERO_FOLDED
            and any(_is_scalar_zero(a) for a in call.args) and call.ty.ndim >= 0)  # fmt: skip


def _calls(func) -> bool:
    """Whether `func` holds a call to write out. Its bindings only (normalized Relax binds
    every call; a decoder's function has 2000 bindings and 100 000 expressions in all)."""
    from tvm import relax

    body = func.body
    if not isinstance(body, relax.SeqExpr):
        found = []
        relax.analysis.post_order_visit(
            func, lambda e: found.append(e) if _is_self_difference(e) or _has_zero_operand(e) else None)
        return bool(found)
    return any(_is_self_difference(b.value) or _has_zero_operand(b.value)
               for block in body.blocks for b in block.bindings)  # fmt: skip


def _writer():
    """The mutator class (made here: TVM is imported only when a graph is lowered)."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Writer(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if _is_self_difference(call):
                x, op, dtype = call.args[0], relax.op, str(call.args[0].ty.dtype)
                return op.where(op.isfinite(x), relax.const(0, dtype), relax.const(float("nan"), dtype))
            if _has_zero_operand(call):
                return _with_tensor_zeros(call)
            return call

    return Writer


def _with_tensor_zeros(call):
    """`call` with each scalar zero operand a (1, ..., 1) tensor of the result's rank (at
    least 1; a scalar result is reshaped back)."""
    import numpy as np
    from tvm import relax

    rank = call.ty.ndim
    shape = (1,) * max(rank, 1)
    args = [relax.const(np.full(shape, a.value.numpy()), str(a.ty.dtype)) if _is_scalar_zero(a) else a
            for a in call.args]  # fmt: skip
    out = relax.Call(call.op, args, call.attrs, call.ty_args, call.span)
    return out if rank > 0 else relax.op.reshape(out, ())
