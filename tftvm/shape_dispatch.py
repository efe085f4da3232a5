"""An op with symbolic dims that runs static variants at chosen input shapes.

MetaSchedule measures concrete shapes only, so a kernel written for any batch is tuned at
representative shapes: `tftvm.tune(op, shapes=[...])` specializes the op's PrimFunc at each
(`PrimFunc.specialize`), tunes those, and returns a `ShapeDispatchOp`: a call whose input
shapes are one of them runs the tuned static variant, any other call the general op. Eager
calls and calls traced with static shapes choose when called; traced with a dim unknown (a
serving signature's None batch), the graph chooses per call (a tf.cond on the shapes).
"""
from __future__ import annotations

import tensorflow as tf


def specialized(func, shapes, name: str):
    """`func` (a PrimFunc) with its input buffers given `shapes` (one per input buffer, in
    order; its outputs follow from them). ValueError naming the input and dim where a shape
    does not fit the function (wrong rank, a fixed dim that differs, a dim shared by two
    inputs given two values, a dim that no input sets alone)."""
    from tvm import tirx

    buffers = [p for p in func.params if isinstance(p.ty, tirx.BufferType)]
    if len(buffers) != len(func.params):
        raise ValueError(f"tftvm op '{name}' takes scalar parameters; shapes= specializes buffers only")
    inputs = buffers[: len(shapes)]  # the caller (variant) checked there is one shape per input
    values: dict = {}  # symbolic var -> int
    for param, shape in zip(inputs, shapes):
        dims = list(param.ty.shape)
        shape = tuple(int(d) for d in shape)
        if len(shape) != len(dims):
            raise ValueError(f"tftvm op '{name}': input '{param.name}' has rank {len(dims)}, shape {shape} given")
        for axis, (dim, value) in enumerate(zip(dims, shape)):
            if isinstance(dim, tirx.Var):
                if values.setdefault(dim, value) != value:
                    raise ValueError(f"tftvm op '{name}': dim '{dim}' is {values[dim]} by an earlier input and "
                                     f"{value} by input '{param.name}' (dim {axis})")  # fmt: skip
    for param, shape in zip(inputs, shapes):
        for axis, (dim, value) in enumerate(zip(param.ty.shape, shape)):
            got = _evaluated(dim, values)
            if got is None:
                raise ValueError(f"tftvm op '{name}': dim {axis} of input '{param.name}' ({dim}) is not set by "
                                 "an input dim of its own; give the op's shapes another way")  # fmt: skip
            if got != int(value):
                raise ValueError(f"tftvm op '{name}': dim {axis} of input '{param.name}' is {dim} = {got}, "
                                 f"shape {tuple(shape)} given")  # fmt: skip
    static = {p: tirx.decl_buffer(tuple(int(d) for d in s), p.ty.dtype, p.name) for p, s in zip(inputs, shapes)}
    return func.specialize(static)


def _evaluated(dim, values) -> int | None:
    """`dim` (a TIR expression of symbolic dims) with `values` put in, or None if it stays symbolic."""
    from tvm import tirx
    from tvm.sym.analyzer import Analyzer

    analyzer = Analyzer()
    for var, value in values.items():
        analyzer.bind(var, value)
    bound = analyzer.simplify(dim)
    return int(bound) if isinstance(bound, tirx.IntImm) else None


class ShapeDispatchOp:
    """Call like the general op; calls whose input shapes have a variant run it."""

    def __init__(self, general, variants: dict):
        self.general = general  # a TvmOp with symbolic dims
        self.variants = dict(variants)  # tuple of input shapes -> static TvmOp
        self.name = general.name
        self.signature = general.signature

    def __call__(self, *args):
        shapes = _static_shapes(args)
        if shapes is None and self.variants and not tf.executing_eagerly():
            return self._switch(args)
        return self.variants.get(shapes, self.general)(*args)

    def _switch(self, args):
        """Traced with dims unknown (a None batch): a tf.cond per variant whose shapes the
        inputs may have, on their shapes at run time; the general op where none matches."""
        tensors = [self.general._tftvm_check(a, i) for i, a in enumerate(args)]
        call = lambda op: lambda: op(*tensors)  # noqa: E731
        branch = call(self.general)
        for shapes, variant in self.variants.items():
            if not all(t.shape.is_compatible_with(s) for t, s in zip(tensors, shapes)):
                continue  # a fixed dim or the rank rules it out when traced
            matches = tf.reduce_all([tf.reduce_all(tf.equal(tf.shape(t, out_type=tf.int64), s))
                                     for t, s in zip(tensors, shapes)])  # fmt: skip
            branch = (lambda m, then, other: lambda: tf.cond(m, then, other))(matches, call(variant), branch)
        return branch()

    def kernels(self) -> list:
        return list(self.variants.values())

    def rebuilt(self, **options) -> ShapeDispatchOp:
        """The variants compiled again with `options` (database= after tuning); the general
        op, whose symbolic dims no record fits, stays."""
        return ShapeDispatchOp(self.general, {s: v.rebuilt(**options) for s, v in self.variants.items()})

    def tuning(self, shapes=None):
        """What `tftvm.tune` tunes (tunable.py): the static variants, with one added for each
        set of input `shapes` it has not got."""
        from . import tunable

        dispatch = self.with_variants(shapes or ())
        if not dispatch.variants:
            raise ValueError(f"tftvm.tune: op '{self.name}' has no static variant to tune: give shapes=")
        return tunable.of_ops(dispatch.kernels(), dispatch.rebuilt, dispatch)

    def with_variants(self, shapes_list) -> ShapeDispatchOp:
        """This op with a static variant (default schedule) for each set of input shapes."""
        variants = dict(self.variants)
        for shapes in shapes_list:
            if not (isinstance(shapes, (list, tuple)) and all(isinstance(s, (list, tuple)) for s in shapes)):
                raise ValueError(f"tftvm op '{self.name}': shapes= takes sets of input shapes, one shape per "
                                 f"input, e.g. [[(16, 32), (32, 24)]]; got the set {shapes!r}")  # fmt: skip
            key = tuple(tuple(int(d) for d in s) for s in shapes)
            if key not in variants:
                variants[key] = self.general.at_shapes(key)
        return ShapeDispatchOp(self.general, variants)

    def __repr__(self) -> str:
        return f"<tftvm op {self.signature.describe(self.name)}, static at {sorted(self.variants)}>"


def _static_shapes(args):
    """The inputs' shapes as a tuple of int tuples, or None where one is not fully known
    (traced with a None dim: the graph chooses, see _switch)."""
    shapes = []
    for a in args:
        shape = getattr(a, "shape", None)
        if shape is None or not tf.TensorShape(shape).is_fully_defined():
            return None
        shapes.append(tuple(tf.TensorShape(shape).as_list()))
    return tuple(shapes)
