"""Float sums and means over one element, which keep its sign of zero as TF does.

TF reduces over axes whose elements number one by passing the element on (its reduction
drops axes of size 1 first): the sum of a single -0.0 is -0.0. Over more elements its sum
starts from +0.0, as TVM's does, and the sum of -0.0s is +0.0. TVM's sum over one element
started from +0.0 too, giving +0.0 where TF gives -0.0, and a reciprocal, a division or an
atan2 after it then took the other sign (1 / sum: +inf, TF -inf). So where the reduced axes
may hold one element (each is 1 or a `None` dim), the sum starts from -0.0 (the identity of
float addition: -0 + x is x for every x) when they hold one element as called, and from
+0.0 otherwise; a mean divides that sum by the count, as TF's does.
"""
from __future__ import annotations

from .fast_math import first_dtype, legalization
from .reduce_axes import over_axes


def legalize_map() -> dict:
    """For LegalizeOps' customize_legalize_map."""
    return {name: legalization(name, _applies, _reduction(name == "relax.mean"), _arguments)
            for name in ("relax.sum", "relax.mean")}  # fmt: skip


def _reduction(mean: bool):
    def reduce(x, axis, keepdims):
        import tvm
        from tvm import te, tirx

        count = _count(x.shape, axis)

        def start(dtype):  # -0.0 where one element is reduced, else +0.0
            # as bits: LLVM's no-signed-zeros flag lets it fold a select of -0.0 and +0.0 to either
            width = tvm.DataType(dtype).bits
            sign = tirx.Cast(f"uint{width}", count == 1) << tirx.const(width - 1, f"uint{width}")
            return tirx.reinterpret(dtype, sign)

        total = over_axes(x, axis, keepdims, te.comm_reducer(lambda a, b: a + b, start, name="sum"), "sum")
        if not mean or (isinstance(count, tirx.IntImm) and int(count) == 1):
            return total  # the mean of one element is its sum
        return te.compute(total.shape, lambda *i: total(*i) / tirx.Cast(x.dtype, count), name="mean")

    return reduce


def _count(shape, axis):
    """The number of elements reduced over `axis` (None: all) of `shape`: a PrimExpr."""
    import math

    from tvm import tirx

    dims = list(shape)
    axes = range(len(dims)) if axis is None else [a % len(dims) for a in axis]
    return math.prod((dims[a] for a in axes), start=tirx.IntImm("int64", 1))


def _arguments(call):
    axis = None if call.attrs.axis is None else [int(a) for a in call.attrs.axis]
    return [call.args[0], axis, bool(call.attrs.keepdims)]


def _applies(call) -> bool:
    """A float reduction whose axes each hold one element or a `None` count of them."""
    from tvm import tirx

    shape = call.args[0].ty.shape
    if "float" not in first_dtype(call) or shape is None:
        return False
    dims = list(shape.values)
    axes = range(len(dims)) if call.attrs.axis is None else [int(a) % len(dims) for a in call.attrs.axis]
    return all(not isinstance(dims[a], tirx.IntImm) or int(dims[a]) == 1 for a in axes)
