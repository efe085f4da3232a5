"""A view (a slice, reshape, expand_dims or squeeze) that only other views read, once per
reader: each reader's chain of views then fuses into the kernel after it, which reads the
source where it is, instead of one kernel writing the shared view out and the readers
reading it back.

FuseOps fuses a producer into its consumer only where it has one: a keras_hub decoder's
step slices each layer's cache out of the stacked cache, `cache[:, layer]` (3 MB at GPT-2
small's batch 8), and slices keys and values out of that, each into its cache update. With
two readers the layer's slice was a copy of its own, written and read back per layer and
step. A view is index arithmetic: repeating it per reader costs nothing.
"""
from __future__ import annotations

VIEWS = frozenset({"relax.strided_slice", "relax.reshape", "relax.expand_dims", "relax.squeeze"})


MAX_ROUNDS = 16  # a chain of views unshared from its last view up, one view per round


def unshare(mod):
    """`mod` with every view that only views read (two or more of them) bound once per
    reader, the shared binding gone; repeated, since the view a repeated view reads then
    has two readers in turn (a slice, then the reshape that drops its axis)."""
    import tvm
    from tvm import relax

    for _ in range(MAX_ROUNDS):
        changed = False
        for gv, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                shared = _shared_views(func)
                if shared:
                    if not changed:
                        mod = mod.clone()  # the caller's module stays as it was
                    mod[gv] = _unsharer()(mod, shared).visit_expr(func)
                    changed = True
        if not changed:
            return mod
        mod = tvm.transform.Sequential([relax.transform.DeadCodeElimination(), relax.transform.Normalize()])(mod)
    return mod


def _is_view(value) -> bool:
    from tvm import relax

    return isinstance(value, relax.Call) and getattr(value.op, "name", "") in VIEWS


def _shared_views(func) -> dict:
    """var -> its view call, for each view bound in `func` that two or more bindings read,
    every one of them a view of it."""
    from tvm import relax

    from .bindings import readers_and_vars

    var_of, readers = readers_and_vars(func)
    shared = {}
    for value, var in var_of.items():
        reads = readers.get(var, [])
        if (_is_view(value) and isinstance(value.args[0], relax.Var) and len(reads) >= 2
                and all(r is not None and _is_view(r) for r in reads)):  # fmt: skip
            shared[var] = value
    return shared


def _unsharer():
    """The mutator class (made here: TVM is imported only when a graph is lowered)."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Unsharer(relax.PyExprMutator):
        """Replaces each read of a shared view by a fresh binding of that view."""

        def __init__(self, mod, shared: dict):
            super().__init__(mod)
            self.shared = shared

        def visit_call_(self, call):
            if not _is_view(call) or not any(a in self.shared for a in call.args):
                return super().visit_call_(call)
            args = [self._fresh(a) if isinstance(a, relax.Var) and a in self.shared else self.visit_expr(a)
                    for a in call.args]  # fmt: skip
            return relax.Call(call.op, args, call.attrs, call.ty_args)

        def _fresh(self, var):
            view = self.shared[var]
            args = [self._fresh(a) if isinstance(a, relax.Var) and a in self.shared else self.visit_expr(a)
                    for a in view.args]  # fmt: skip
            return self.builder_.emit(relax.Call(view.op, args, view.attrs, view.ty_args))

    return Unsharer

