"""A strided 1x1 conv's stride moved up to the ops that compute its input (OpenVINO's
StridesOptimization).

A 1x1 conv with stride s and no padding reads its input at every s-th pixel only: it is a
stride-1 conv of x[:, ::s, ::s, :]. Where every reader of x reads it so, nothing needs the
other pixels, and the ops that compute x can compute only those:
- an elementwise op computes them from the same pixels of its operands (an operand that is
  constant along height and width, a bias or a batch norm's scale, stays as it is);
- a stride-1 1x1 conv from the same pixels of its input;
- a stride-1 conv of any size (and dilation) is that conv with stride s: its output pixel i
  reads input rows i*s - top + ky*d, as the stride-1 conv's pixel i*s did, and with the same
  padding it makes ceil(H_out / s) rows, the count the 1x1 conv read.
A value something else reads as well is sliced (x[:, ::s, ::s, :]) where the chain needs it,
and the chain stops there.

ResNet v1's stage transitions are such 1x1 convs (stride 2, the block's first conv and its
shortcut, both on the previous block's output): the previous block's 3x3 conv, its 1x1 expand
and its residual add then run on a quarter of the pixels, and the stride-2 convs at stride 1.
NHWC only (what the TF frontend writes); height and width must be static.
"""
from __future__ import annotations

from .bindings import readers_and_vars, shape_of, static_dims

# Ops whose output element at an index reads their operands at that (broadcast) index only.
ELEMENTWISE = frozenset(f"relax.{name}" for name in (
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "where", "clip", "astype",
    "nn.relu", "nn.leakyrelu", "nn.gelu", "nn.gelu_tanh", "nn.silu", "sigmoid", "tanh", "exp", "negative",
    "sqrt", "rsqrt", "abs", "square", "erf", "log"))  # fmt: skip


def fold(mod):
    """`mod` with the stride of each 1x1 conv (NHWC, no padding, stride > 1) moved up into the
    ops that compute its input, where those values have no reader that needs their other
    pixels (the module's rule); unchanged where there is none."""
    import tvm
    from tvm import relax

    canonical = relax.transform.CanonicalizeBindings()(mod)  # no `lv1 = lv` between a value and its readers
    changed = {}
    for gv, func in canonical.functions.items():
        if not isinstance(func, relax.Function):
            continue
        subsampled = subsampled_values(func)
        if subsampled:
            changed[gv] = _folded(canonical, func, subsampled)
    if not changed:
        return mod
    return relax.transform.DeadCodeElimination()(tvm.IRModule({**canonical.functions, **changed}))


def subsampled_values(func) -> dict:
    """Variable -> strides (sh, sw), for each value of `func` that can be computed at every
    strides-th pixel only (by its own op: elementwise, or a stride-1 conv) and whose every
    reader needs no other pixel: a 1x1 conv of it with those strides and no padding, or a
    value of this dict computed from the same pixels of it (an elementwise op, a stride-1
    1x1 conv without padding). The bindings are walked last to first, so a value's readers
    are decided before it."""
    var_of, readers = readers_and_vars(func)
    values = {var: value for value, var in var_of.items()}
    need = {}
    for var in reversed(list(values)):
        reads = readers.get(var, [])
        if not reads or None in reads or not _subsamplable(values[var]):
            continue
        strides = {_one_by_one_stride(r, var) or (need.get(var_of[r]) if _same_pixels(r, var) else None)
                   for r in reads}  # fmt: skip
        if len(strides) == 1 and None not in strides:
            need[var] = strides.pop()
    return need


def _subsamplable(value) -> bool:
    """Whether `value`'s op computes a 4-D NHWC result with static height and width that it
    can compute at every s-th pixel only: an elementwise op whose operands vary along both
    height and width or along neither, or a stride-1 NHWC conv."""
    dims = shape_of(value) if hasattr(value, "op") else None
    if dims is None or len(dims) != 4 or static_dims(dims[1:3]) is None:
        return False
    name = getattr(value.op, "name", "")
    if name == "relax.nn.conv2d":
        return str(value.attrs.data_layout) == "NHWC" and tuple(int(s) for s in value.attrs.strides) == (1, 1)
    return name in ELEMENTWISE and all(_spatial_role(arg, value) is not None for arg in value.args)


def _same_pixels(reader, var) -> bool:
    """Whether `reader`'s result at a pixel reads `var` at that pixel only: an elementwise
    op with `var` as an operand of its height and width, or a stride-1 1x1 conv without
    padding of `var` (as data)."""
    name = getattr(getattr(reader, "op", None), "name", "")
    if name == "relax.nn.conv2d":
        return reader.args[0].same_as(var) and not reader.args[1].same_as(var) and _one_by_one_unpadded(reader)
    if name not in ELEMENTWISE:
        return False
    return all(_spatial_role(arg, reader) == "same" for arg in reader.args if arg.same_as(var))


def _one_by_one_stride(call, data) -> tuple[int, int] | None:
    """The strides of `call` where it is a 1x1 NHWC conv of `data` (as data only) with
    strides other than (1, 1), no padding and no dilation; else None."""
    if getattr(getattr(call, "op", None), "name", "") != "relax.nn.conv2d" or not call.args[0].same_as(data):
        return None
    if call.args[1].same_as(data) or not _one_by_one_unpadded(call):
        return None
    strides = tuple(int(s) for s in call.attrs.strides)
    if strides == (1, 1) or str(call.attrs.data_layout) != "NHWC" or any(int(d) != 1 for d in call.attrs.dilation):
        return None
    return strides


def _conv(call, data, weights, strides):
    """`call` (a conv2d) on `data` and `weights` with `strides`, its other attributes kept."""
    from tvm import relax

    a = call.attrs
    return relax.op.nn.conv2d(data, weights, strides, a.padding, a.dilation, a.groups, a.data_layout,
                              a.kernel_layout, a.out_layout, a.out_dtype)  # fmt: skip


def _folded(mod, func, need: dict):
    """`func` with each value of `need` computed subsampled (and its full value left to
    DeadCodeElimination), the strided 1x1 convs that read them at stride 1."""
    from tvm import relax

    var_of, _ = readers_and_vars(func)
    needed = {value: need[var] for value, var in var_of.items() if var in need}

    @relax.expr_functor.mutator
    class Folder(relax.PyExprMutator):
        def __init__(self):
            super().__init__(mod)
            self.subsampled = {}  # original var -> the var of its value at every strides-th pixel
            self.slices = {}  # (original var, strides) -> its strided slice

        def visit_call_(self, call):
            new = self.visit_expr_post_order(call)
            if call in needed:  # computed subsampled as well; the full value is left unread
                self.subsampled[var_of[call]] = self.builder_.emit(self.subsampled_op(call, needed[call]))
            data = call.args[0] if getattr(call.op, "name", "") == "relax.nn.conv2d" else None
            if data in self.subsampled and _one_by_one_stride(call, data):
                return _conv(new, self.subsampled[data], new.args[1], (1, 1))
            return new

        def subsampled_op(self, value, strides):
            if getattr(value.op, "name", "") == "relax.nn.conv2d":
                weights = self.visit_expr(value.args[1])
                data = value.args[0]
                if _one_by_one_unpadded(value) and data in self.subsampled:  # the same pixels of its input
                    return _conv(value, self.subsampled[data], weights, (1, 1))
                return _conv(value, self.visit_expr(data), weights, strides)
            args = [self.operand(a, strides) if _spatial_role(a, value) == "same" else self.visit_expr(a)
                    for a in value.args]  # fmt: skip
            return relax.Call(value.op, args, value.attrs, value.ty_args)

        def operand(self, arg, strides):
            """`arg` (4-D, static height and width) at every strides-th pixel: its subsampled
            value, or a strided slice of it where it has readers that need every pixel."""
            if arg in self.subsampled:
                return self.subsampled[arg]
            key = (arg, strides)
            if key not in self.slices:
                h, w = static_dims(shape_of(arg)[1:3])
                self.slices[key] = self.builder_.emit(
                    relax.op.strided_slice(self.visit_expr(arg), [1, 2], [0, 0], [h, w], list(strides)))
            return self.slices[key]

    return Folder().visit_expr(func)


def _one_by_one_unpadded(conv) -> bool:
    weights = static_dims(shape_of(conv.args[1]) or [None])
    a = conv.attrs
    return (weights is not None and weights[:2] == [1, 1] and str(a.kernel_layout) == "HWIO"
            and not any(int(p) for p in a.padding))  # fmt: skip


def _spatial_role(arg, result) -> str | None:
    """How an elementwise op's operand `arg` relates to the op's 4-D NHWC `result`: "same"
    where it is 4-D with the result's static height and width (subsampled with it), "constant"
    where it is constant along both (a bias, a batch norm's scale, a scalar, clip's bounds: it
    stays as it is); None otherwise (broadcast along one of them only)."""
    from tvm import relax

    if not isinstance(arg.ty, relax.TensorType):
        return "constant"
    dims = shape_of(arg)
    if dims is None:
        return None
    if len(dims) < 3 or static_dims(dims[-3:-1]) == [1, 1]:
        return "constant"
    same = len(dims) == 4 and static_dims(dims[1:3]) is not None
    return "same" if same and static_dims(dims[1:3]) == static_dims(shape_of(result)[1:3]) else None
