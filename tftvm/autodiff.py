"""grad="auto": reverse-mode differentiation of TE compute graphs, built as TE again.

The backward of each compute stage is a new TE compute per producer it reads:
for an access P[v0, v1, ...] whose indices are distinct loop variables (output
axes or sum-reduction axes) spanning P's whole shape, the gradient is the
upstream gradient times the body's derivative, summed over the loop variables
the access does not use. That covers elementwise and broadcast ops, sums,
transposes, matmuls and their fusions. Other accesses (shifted or strided
indices, as in convolutions) raise NotImplementedError: give grad= yourself.
Intermediate stages are recomputed in the backward kernel, not stored.
"""
from __future__ import annotations


def backward_compute(inputs, outputs, name: str) -> tuple[list, list]:
    """The backward of a TE compute as TE again: (its inputs: the forward inputs, then one
    upstream gradient per output; its outputs: the gradient of each floating-point input)."""
    from tvm import te

    upstream = [te.placeholder(t.shape, t.dtype, name=f"d_{t.op.name}") for t in outputs]
    adjoint = _adjoints(outputs, upstream)
    floats = [x for x in inputs if _is_float(x.dtype)]
    if not floats:
        raise ValueError(f"grad='auto' for '{name}': no floating-point input to differentiate")
    grads = []
    for x in floats:
        g = adjoint.get(x.op)
        if g is None:  # the outputs do not depend on x
            g = te.compute(x.shape, _constant(_zero(x.dtype)), name=f"d_{x.op.name}")
        grads.append(g)
    return list(inputs) + upstream, grads


def _is_float(dtype) -> bool:
    return str(dtype).startswith(("float", "bfloat"))


def _zero(dtype):
    from tvm import tirx

    return tirx.const(0, str(dtype))


def _adjoints(outputs, upstream) -> "_Adjoints":
    adj = _Adjoints()
    for t, up in zip(outputs, upstream):
        adj.add(t, up)
    for t in reversed(_topo_order(outputs)):  # consumers before their producers
        dt = adj.get(t.op)
        if dt is None or not hasattr(t.op, "body"):
            continue
        for p in t.op.input_tensors:
            if _is_float(p.dtype):
                for contribution in _stage_backward(t, dt, p):
                    adj.add(p, contribution)
    return adj


class _Adjoints:
    """Accumulated gradient tensors, keyed by operation (TE ops are compared with same_as)."""

    def __init__(self):
        self._items: list = []

    def get(self, op):
        for o, g in self._items:
            if o.same_as(op):
                return g
        return None

    def add(self, tensor, grad):
        from tvm import te

        for k, (o, g) in enumerate(self._items):
            if o.same_as(tensor.op):
                total = te.compute(tensor.shape, _plus(g, grad), name=f"d_{tensor.op.name}_acc")
                self._items[k] = (o, total)
                return
        self._items.append((tensor.op, grad))


def _topo_order(outputs) -> list:
    order, seen = [], []

    def visit(t):
        if any(s.same_as(t.op) for s in seen):
            return
        seen.append(t.op)
        for p in getattr(t.op, "input_tensors", []):
            visit(p)
        order.append(t)

    for t in outputs:
        visit(t)
    return order


def _stage_backward(t, dt, p) -> list:
    """Gradient contributions to producer `p` from compute stage `t`, one per access."""
    from tvm import te, tirx
    from tvm.sym.analyzer import Analyzer

    body = t.op.body[t.value_index]
    axes = [iv for iv in t.op.axis]
    reduce_axes: list = []
    if isinstance(body, tirx.Reduce):
        if type(body.combiner.result[0]).__name__ != "Add" or not _is_true(body.condition):
            raise NotImplementedError(
                f"grad='auto': stage '{t.op.name}' reduces with something other than an "
                "unconditional sum; give grad= yourself"
            )
        reduce_axes = list(body.axis)
        source = body.source[body.value_index]
    else:
        source = body
    loop_vars = axes + reduce_axes
    analyzer = Analyzer()
    contributions = []
    for load in _loads_of(source, p):
        indices = list(load.args[1:])
        positions = []
        for d, index in enumerate(indices):
            match = [iv for iv in loop_vars if iv.var.same_as(index)]
            if not match or any(match[0] is q for q in positions):
                raise NotImplementedError(
                    f"grad='auto': stage '{t.op.name}' reads '{p.op.name}' at index {index}, "
                    "not a distinct loop variable; give grad= yourself"
                )
            iv = match[0]
            if not (analyzer.can_prove_equal(iv.dom.min, 0)
                    and analyzer.can_prove_equal(iv.dom.extent, p.shape[d])):  # fmt: skip
                raise NotImplementedError(
                    f"grad='auto': stage '{t.op.name}' reads only part of '{p.op.name}' "
                    f"(axis {d}); give grad= yourself"
                )
            positions.append(iv)
        rest = [iv for iv in loop_vars if not any(iv is q for q in positions)]

        contributions.append(te.compute(p.shape, _access_gradient(source, load, positions, rest, axes, dt, p),
                                        name=f"d_{p.op.name}_from_{t.op.name}"))  # fmt: skip
    return contributions


# te.compute takes `lambda *indices` only (no keyword defaults): these build such closures.
def _constant(value):
    return lambda *i: value


def _plus(a, b):
    return lambda *i: a(*i) + b(*i)


def _access_gradient(source, load, positions, rest, axes, dt, p):
    """The element function of one access's gradient contribution."""
    from tvm import te

    def element(*js):
        env = [(iv.var, j) for iv, j in zip(positions, js)]
        new_axes = [te.reduce_axis((iv.dom.min, iv.dom.min + iv.dom.extent), iv.var.name)
                    for iv in rest]  # fmt: skip
        env += [(iv.var, r.var) for iv, r in zip(rest, new_axes)]
        derivative = _diff(source, load, env)
        if derivative is None:
            return _zero(p.dtype)
        value = dt(*[_rebuild(iv.var, env) for iv in axes]) * derivative
        return te.sum(value, axis=new_axes) if new_axes else value

    return element


def _is_true(cond) -> bool:
    from tvm import tirx

    return isinstance(cond, tirx.IntImm) and int(cond.value) == 1


def _is_load(e) -> bool:
    from tvm import ir, tirx

    return isinstance(e, ir.Call) and e.op.name == "te.tensor_load"


def _loads_of(e, p) -> list:
    """Every te.tensor_load of producer `p` in expression `e`, each occurrence once."""
    found: list = []

    def walk(x):
        if _is_load(x):
            if x.args[0].op.same_as(p.op):
                found.append(x)
            for a in x.args[1:]:
                walk(a)
            return
        for child in _children(x):
            walk(child)

    walk(e)
    return found


def _children(e) -> list:
    from tvm import ir, tirx

    if isinstance(e, ir.Call):
        return list(e.args)
    if isinstance(e, tirx.Select):
        return [e.condition, e.true_value, e.false_value]
    if isinstance(e, tirx.Cast):
        return [e.value]
    if hasattr(e, "a") and hasattr(e, "b"):
        return [e.a, e.b]
    return []


_BINARY = {
    "Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
    "Div": lambda a, b: a / b,
}  # fmt: skip


def _rebuild(e, env):
    """`e` with variables replaced per `env` (pairs of (Var, expr))."""
    from tvm import ir, tirx

    if isinstance(e, tirx.Var):
        for v, new in env:
            if v.same_as(e):
                return new
        return e
    if isinstance(e, (tirx.IntImm, tirx.FloatImm)):
        return e
    if _is_load(e):
        return e.args[0](*[_rebuild(a, env) for a in e.args[1:]])
    if isinstance(e, tirx.Cast):
        return tirx.Cast(_dtype(e), _rebuild(e.value, env))
    if isinstance(e, tirx.Select):
        return tirx.Select(*[_rebuild(c, env) for c in _children(e)])
    if isinstance(e, ir.Call):
        return ir.Call(e.op, [_rebuild(a, env) for a in e.args], ret_ty=e.ty)
    name = type(e).__name__
    if hasattr(e, "a") and hasattr(e, "b"):
        a, b = _rebuild(e.a, env), _rebuild(e.b, env)
        if name in _BINARY:
            return _BINARY[name](a, b)
        return getattr(tirx, name)(a, b)  # Max, Min, comparisons, And, Or
    raise NotImplementedError(f"grad='auto': cannot rebuild expression {e} ({name})")


def _diff(e, load, env):
    """d e / d load (that one occurrence), rebuilt per env; None means zero."""
    from tvm import ir, tirx

    if e.same_as(load):
        return tirx.const(1, _dtype(load))
    if isinstance(e, (tirx.Var, tirx.IntImm, tirx.FloatImm)) or _is_load(e):
        return None
    name = type(e).__name__
    if name in ("Add", "Sub"):
        da, db = _diff(e.a, load, env), _diff(e.b, load, env)
        return _sum(da, None if db is None else -db if name == "Sub" else db)
    if name == "Mul":
        da, db = _diff(e.a, load, env), _diff(e.b, load, env)
        return _sum(None if da is None else da * _rebuild(e.b, env),
                    None if db is None else _rebuild(e.a, env) * db)  # fmt: skip
    if name == "Div":
        a, b = _rebuild(e.a, env), _rebuild(e.b, env)
        da, db = _diff(e.a, load, env), _diff(e.b, load, env)
        return _sum(None if da is None else da / b, None if db is None else -(a * db) / (b * b))
    if name in ("Max", "Min"):
        a, b = _rebuild(e.a, env), _rebuild(e.b, env)
        da, db = _diff(e.a, load, env), _diff(e.b, load, env)
        if da is None and db is None:
            return None
        zero = _zero(_dtype(e))
        pick_a = a >= b if name == "Max" else a <= b
        return tirx.Select(pick_a, zero if da is None else da, zero if db is None else db)
    if isinstance(e, tirx.Select):
        dt_, df = _diff(e.true_value, load, env), _diff(e.false_value, load, env)
        if dt_ is None and df is None:
            return None
        zero = _zero(_dtype(e))
        return tirx.Select(_rebuild(e.condition, env), zero if dt_ is None else dt_,
                           zero if df is None else df)  # fmt: skip
    if isinstance(e, tirx.Cast):
        dv = _diff(e.value, load, env)
        return None if dv is None or not _is_float(_dtype(e)) else tirx.Cast(_dtype(e), dv)
    if isinstance(e, ir.Call) and len(e.args) == 1:
        dx = _diff(e.args[0], load, env)
        if dx is None:
            return None
        x = _rebuild(e.args[0], env)
        rule = _UNARY.get(e.op.name)
        if rule is None:
            raise NotImplementedError(f"grad='auto': no derivative for {e.op.name}; give grad= yourself")
        return rule(x) * dx
    raise NotImplementedError(f"grad='auto': no derivative for {name} in {e}; give grad= yourself")


def _dtype(e) -> str:
    return str(e.ty.dtype)


def _sum(a, b):
    """a + b where None is zero."""
    return b if a is None else a if b is None else a + b


def _unary_rules():
    from tvm import tirx

    one = lambda x: tirx.const(1, _dtype(x))  # noqa: E731
    return {
        "tirx.exp": lambda x: tirx.exp(x),
        "tirx.log": lambda x: one(x) / x,
        "tirx.sqrt": lambda x: one(x) / (tirx.const(2, _dtype(x)) * tirx.sqrt(x)),
        "tirx.tanh": lambda x: one(x) - tirx.tanh(x) * tirx.tanh(x),
        "tirx.sigmoid": lambda x: tirx.sigmoid(x) * (one(x) - tirx.sigmoid(x)),
        "tirx.sin": lambda x: tirx.cos(x),
        "tirx.cos": lambda x: -tirx.sin(x),
        "tirx.fabs": lambda x: tirx.Select(x >= tirx.const(0, _dtype(x)), one(x), -one(x)),
    }


class _LazyRules(dict):
    def get(self, key, default=None):
        if not self:
            self.update(_unary_rules())
        return super().get(key, default)


_UNARY = _LazyRules()
