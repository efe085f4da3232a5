"""A program's large constants (its weights) as an argument of its entry functions.

A constant in a Relax program is written into the compiled library, and the VM that
loads the library deserializes its own copy: two more copies of a model's weights. A
weight the converter bound from a TF tensor held beside the graph (tfgraph/weights.py)
shares that tensor's memory; lifted out, it stays shared, and the library holds none.
So, after the passes that fold constants (packed layouts, folded scales: those are new
arrays, held once, by the caller), every constant of `min_bytes` or more becomes an item
of one tuple parameter, `weights`, appended to each Relax function of the module; the
caller passes the tuple on every call (one argument, made once).
"""
from __future__ import annotations

import functools

WEIGHTS_PARAM = "weights"


def lift(mod, min_bytes: int) -> tuple:
    """(module, [TVM tensor]): `mod` (changed in place) whose Relax functions take the
    constants of `min_bytes` or more as items of a last tuple parameter, in the order of
    the list; [] where it has none."""
    from tvm import relax

    functions = {gv: f for gv, f in mod.functions.items() if isinstance(f, relax.Function)}
    index, constants = {}, []
    for func in functions.values():
        for c in _constants(func):
            key = _key(c)
            if c.value.numel() * _itemsize(c) >= min_bytes and key not in index:
                index[key] = len(constants)
                constants.append(c)
    if not constants:
        return mod, []
    weights_ty = relax.TupleType([c.ty for c in constants])
    for gv, func in functions.items():
        mod[gv] = _with_weights_param(func, index, constants, weights_ty)
    return mod, [c.value for c in constants]


def _key(c) -> tuple:
    return c.value.data_ptr(), tuple(c.value.shape), str(c.value.dtype)


def _itemsize(c) -> int:
    dtype = c.value.dtype
    return (dtype.bits * dtype.lanes + 7) // 8


def _constants(func) -> list:
    from tvm import relax
    from tvm.ir.expr import GenericConst

    found = []
    relax.analysis.post_order_visit(func, lambda e: found.append(e) if isinstance(e, GenericConst) else None)
    return found


def _with_weights_param(func, index: dict, constants: list, weights_ty):
    """`func` with a last parameter of `weights_ty` whose items replace its lifted constants."""
    from tvm import relax

    param = relax.Var(WEIGHTS_PARAM, weights_ty)
    lifter = _lifter()(index, constants)
    body = lifter.visit_expr(func.body)
    items = lifter.items
    # The mutator lives on in TVM's FFI (a cycle Python's collector cannot see): it keeps no weights.
    lifter.index, lifter.constants, lifter.items = {}, [], {}
    # Every entry takes the parameter, whether it reads a weight or not: the caller passes it to each.
    bindings = [relax.VarBinding(items[i], relax.TupleGetItem(param, i)) for i in sorted(items)]
    blocks = [relax.BindingBlock(bindings), *body.blocks] if bindings else list(body.blocks)
    body = relax.SeqExpr(blocks, body.body)
    return relax.Function([*func.params, param], body, func.ret_ty, func.is_pure, func.attrs, func.span)


@functools.cache
def _lifter():
    """The mutator class (made once: each class TVM's decorator makes is kept for good)."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Lifter(relax.PyExprMutator):
        def __init__(self, index: dict, constants: list):
            super().__init__()
            self.index, self.constants = index, constants
            self.items = {}  # position in `constants` -> the Var bound to that item

        def visit_generic_const_(self, op):
            i = self.index.get(_key(op))
            if i is None:
                return op
            if i not in self.items:
                self.items[i] = relax.Var(f"weight{i}", self.constants[i].ty)
            return self.items[i]

    return Lifter
