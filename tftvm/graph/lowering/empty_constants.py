"""Constants with no elements, allocated when the program runs instead of stored in it.

A Relax module can hold a constant of no elements (a reshape to a 0-size shape gives zeros,
which FoldConstant folds), and TVM 0.27's VM executable saves one, but cannot load it back:
`Tensor::Load` fails reading its zero data bytes ("Invalid DLTensor file format"). Its
contents are nothing to keep, so each becomes a kernel's output of its shape and dtype (a
kernel with no elements to write; not an `alloc_tensor`, which the VM's memory planning
takes for its own).
"""
from __future__ import annotations


def allocate(mod):
    """`mod` with every constant of no elements in its Relax functions a kernel's output."""
    from tvm import relax

    if not any(_holds_empty(f) for f in mod.functions.values() if isinstance(f, relax.Function)):
        return mod
    allocator = _allocator()(mod)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function) and _holds_empty(func):
            allocator.builder_.update_func(gv, allocator.visit_expr(func))
    return allocator.builder_.get()


def _is_empty(expr) -> bool:
    from tvm.ir.expr import GenericConst

    return isinstance(expr, GenericConst) and 0 in expr.value.shape


def _holds_empty(func) -> bool:
    from tvm import relax

    found = []
    relax.analysis.post_order_visit(func, lambda e: found.append(e) if _is_empty(e) else None)
    return bool(found)


def _allocator():
    """The mutator class (made here: TVM is imported only when a graph is lowered)."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Allocator(relax.PyExprMutator):
        def visit_generic_const_(self, const):
            if not _is_empty(const):
                return const
            from tvm import topi

            shape, dtype = [int(d) for d in const.value.shape], str(const.value.dtype)
            return self.builder_.emit(self.builder_.call_te(topi.full, shape, dtype, 0, primfunc_name_hint="empty"))

    return Allocator
