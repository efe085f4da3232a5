"""Float sums and means over one element, which keep its sign of zero as TF does.

TF reduces over axes whose elements number one by passing the element on (its reduction
drops axes of size 1 first): the sum of a single -0.0 is -0.0. Over more elements its sum
starts from +0.0, as TVM's does, and the sum of -0.0s is +0.0. TVM's sum over one element
started from +0.0 too, giving +0.0 where TF gives -0.0, and a reciprocal, a division or an
atan2 after it then took the other sign (1 / sum: +inf, TF -inf). Where the reduced axes
hold one element statically, the sum starts from -0.0, the identity of float addition
(-0 + x is x for every x). A None axis that holds one element when called still starts from
+0.0: TVM's reduction cannot see the count it will have.
"""
from __future__ import annotations

from .fast_math import first_dtype, legalization
from .reduce_axes import over_axes


def legalize_map() -> dict:
    """For LegalizeOps' customize_legalize_map."""
    from tvm import te, tirx

    reducer = te.comm_reducer(lambda a, b: a + b, lambda dtype: tirx.const(-0.0, dtype), name="sum")

    def one_element(x, axis, keepdims):  # the mean of one element is its sum
        return over_axes(x, axis, keepdims, reducer, "sum")

    def arguments(call):
        axis = None if call.attrs.axis is None else [int(a) for a in call.attrs.axis]
        return [call.args[0], axis, bool(call.attrs.keepdims)]

    def applies(call):
        shape = call.args[0].ty.shape
        if "float" not in first_dtype(call) or shape is None:
            return False
        dims = list(shape.values)
        axes = range(len(dims)) if call.attrs.axis is None else [int(a) % len(dims) for a in call.attrs.axis]
        return all(isinstance(dims[a], tirx.IntImm) and int(dims[a]) == 1 for a in axes)

    return {name: legalization(name, applies, one_element, arguments) for name in ("relax.sum", "relax.mean")}
