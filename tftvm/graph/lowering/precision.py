"""precision="bf16": matmuls and convs in bf16 with f32 accumulation, on the CPU's matrix units.

The rule: a product runs in bf16 only where the CPU has bf16 matrix instructions that a kernel
here uses (AMX tiles: cpu.amx); elsewhere it stays f32, since bf16 values fed to f32 FMAs
only add conversions. The products it takes: a matmul of f32 activations [..., k] by f32
weights [k, n] (a Dense layer, a projection), and an NHWC conv of f32 weights without groups
(a 1x1 conv of stride 1 without padding as the same matmul over pixels, others as a conv),
with k (the input channels) a multiple of 32 and static image sizes. Its activations are
rounded to bf16 as they enter (the cast fuses into the kernel that makes them; a conv's
padding with it) and its weights once (a constant expression: Relax folds it, or
LiftTransformParams lifts it out of the call when the weights are variables), packed in the
order the tiles read. Results stay f32: the elementwise ops between products (bias,
activations, norms, softmax) run in f32, as oneDNN's and OpenVINO's bf16 modes do, and the
error is the rounding of the products' inputs.
"""
from __future__ import annotations

import dataclasses
import logging

log = logging.getLogger(__name__)

PRECISIONS = ("f32", "bf16")


def check(precision: str) -> str:
    """`precision` as given, where it is one tftvm knows; else a ValueError naming the argument."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return precision


@dataclasses.dataclass
class PrecisionReport:
    """What a precision rewrite did: products moved to bf16 units, and those left in f32."""

    precision: str = "f32"
    units: str = ""  # the instructions the bf16 products run on ("AMX-BF16"), "" where none
    products: int = 0  # matmuls and convs seen
    in_bf16: int = 0  # of those, how many run in bf16
    left: list = dataclasses.field(default_factory=list)  # (op, why) for each product left in f32

    def text(self) -> str:
        if self.precision == "f32":
            return "precision: f32"
        if not self.units:
            return "precision: bf16 asked, but this CPU has no bf16 matrix unit tftvm uses: f32"
        text = f"precision: bf16 on {self.units}: {self.in_bf16} of {self.products} matmuls/convs"
        reasons = sorted({why for _, why in self.left})
        return text + (f"; in f32: {'; '.join(reasons)}" if reasons else "")


def combined(reports: list) -> PrecisionReport:
    """One report for several programs (an optimize result's clusters)."""
    out = PrecisionReport()
    for r in reports:
        out.precision = r.precision if r.precision != "f32" else out.precision
        out.units = out.units or r.units
        out.products += r.products
        out.in_bf16 += r.in_bf16
        out.left += r.left
    return out


def to_bf16(mod, target=None, report: PrecisionReport | None = None, weights=()):
    """`mod` with the eligible products of its functions in bf16 (see the module's rule);
    `report`, if given, is filled in. Weights are constants, or what `main` computes from
    its params at the indices `weights` (a model's variables) alone."""
    import tvm
    from tvm import relax

    from ...cpu import features
    from .fold_scales import weight_derived

    report = report if report is not None else PrecisionReport()
    report.precision = "bf16"
    if not features.amx_bf16(target):
        return mod
    report.units = "AMX-BF16"
    kernels = {}  # the AMX kernels added, by name
    static = weight_derived(mod["main"], weights) if weights else set()

    @relax.expr_functor.mutator
    class Products(relax.PyExprMutator):
        def visit_call_(self, call):
            call = self.visit_expr_post_order(call)
            name = getattr(call.op, "name", "")
            if name not in ("relax.matmul", "relax.nn.conv2d"):
                return call
            report.products += 1
            plan = _matmul_plan(call) if name == "relax.matmul" else _conv_plan(call)
            if not isinstance(plan, str) and not _is_weight(call.args[1], static):
                plan = "weights computed at run time"
            if isinstance(plan, str):
                report.left.append((name, plan))
                return call
            report.in_bf16 += 1
            return plan(self.builder_, kernels)

    rewriter = Products(mod)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    log.info("%s", report.text())
    if not report.in_bf16:
        return mod
    return relax.transform.DeadCodeElimination()(tvm.IRModule(dict(rewriter.builder_.get().functions)))


def _matmul_plan(call):
    """How a matmul runs on AMX (a function of the block builder and the kernels added), or
    why it does not."""
    from ...cpu import amx

    x, w = call.args
    why = _f32_why(call, x, w)
    if why:
        return why
    x_dims, w_dims = _shape(x), _shape(w)
    if x_dims is None or w_dims is None or len(w_dims) != 2 or len(x_dims) < 2:
        return "not activations [..., k] by weights [k, n]"
    if _static(w_dims) is None:
        return "weights of symbolic shape"
    k, n = _static(w_dims)
    if not amx.supports(k, n):
        return f"k = {k}, not a multiple of {amx.K_STEP}"
    return lambda bb, kernels: _amx_matmul(bb, kernels, x, w, k, n, x_dims[:-1] + [n])


def _conv_plan(call):
    """How an NHWC conv runs on AMX: a 1x1 conv of stride 1 unpadded as a matmul over its
    pixels, any other as a conv; or why it does not."""
    from tvm import relax

    from ...cpu import amx

    x, w = call.args
    attrs = call.attrs
    why = _f32_why(call, x, w)
    if why:
        return why
    if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NHWC", "HWIO", "NHWC"):
        return "a conv in another layout than NHWC"
    if int(attrs.groups) != 1:
        return "a grouped or depthwise conv"
    x_dims, w_dims = _shape(x), _static(_shape(w) or [None])
    if w_dims is None or x_dims is None or _static(x_dims[1:]) is None:
        return "a conv of symbolic image or window size"
    kh, kw, k, n = w_dims
    if not amx.supports(k, n):
        return f"k = {k}, not a multiple of {amx.K_STEP}"
    strides, padding = [int(s) for s in attrs.strides], [int(p) for p in attrs.padding]
    if (kh, kw) == (1, 1) and strides == [1, 1] and padding == [0, 0, 0, 0]:
        out_dims = x_dims[:-1] + [n]
        return lambda bb, kernels: _amx_matmul(bb, kernels, x, relax.op.reshape(w, [k, n]), k, n, out_dims)
    dilation = [int(d) for d in attrs.dilation]
    return lambda bb, kernels: _amx_conv(bb, kernels, x, w, (kh, kw, k, n), strides, padding, dilation)


def _amx_matmul(bb, kernels: dict, x, w, k: int, n: int, out_dims):
    """x [..., k] · w [k, n] as the AMX kernel's call: x rounded to bf16 and seen as [rows, k],
    w rounded, padded to whole column blocks and packed; the result [rows, n] f32 reshaped."""
    from tvm import relax

    from ...cpu import amx

    op, emit = relax.op, bb.emit
    n_padded = amx.padded_columns(n)
    rows = 1
    for d in out_dims[:-1]:
        rows = rows * d
    a = emit(op.reshape(op.astype(x, "bfloat16"), [rows, k]))
    packed = emit(_packed(w, [k, n], n_padded, [k // 2, 2, n_padded // 16, 16], [2, 0, 3, 1]))
    kernel = _kernel(bb, kernels, f"amx_matmul_bf16_{k}x{n_padded}", lambda: amx.matmul_bf16(k, n_padded))
    y = emit(relax.call_tir(kernel, [a, packed], relax.TensorType([rows, n_padded], "float32")))
    return op.reshape(_columns(bb, y, n, n_padded), out_dims)


def _amx_conv(bb, kernels: dict, x, w, hwio, strides, padding, dilation):
    """An NHWC conv as the AMX conv kernel's call: x rounded to bf16 and padded, w rounded,
    padded to whole output-channel blocks and packed; the result f32."""
    from tvm import relax

    from ...cpu import amx

    op, emit = relax.op, bb.emit
    kh, kw, k, n = hwio
    batch, height, width, _ = _shape(x)
    top, left, bottom, right = padding
    height, width = int(height) + top + bottom, int(width) + left + right
    a = op.astype(x, "bfloat16")
    if any(padding):
        a = op.nn.pad(a, [0, 0, top, bottom, left, right, 0, 0])
    a = emit(a)
    n_padded = amx.padded_columns(n)
    packed = emit(_packed(w, hwio, n_padded, [kh, kw, k // 2, 2, n_padded // 16, 16], [4, 0, 1, 2, 5, 3]))
    name = f"amx_conv2d_bf16_{height}x{width}x{k}x{n_padded}_{kh}x{kw}_s{strides[0]}x{strides[1]}_d{dilation[0]}x{dilation[1]}"
    kernel = _kernel(bb, kernels, name, lambda: amx.conv2d_bf16(height, width, k, n_padded, (kh, kw), strides, dilation))
    out_h = (height - (kh - 1) * dilation[0] - 1) // strides[0] + 1
    out_w = (width - (kw - 1) * dilation[1] - 1) // strides[1] + 1
    y = emit(relax.call_tir(kernel, [a, packed], relax.TensorType([batch, out_h, out_w, n_padded], "float32")))
    return _columns(bb, y, n, n_padded)


def _packed(w, dims: list, n_padded: int, split: list, order: list):
    """Weights `w` (dims [..., n]) rounded to bf16, their last axis padded to `n_padded`, then
    reshaped to `split` and permuted by `order`: the tiles' B order."""
    from tvm import relax

    op = relax.op
    weights = op.astype(w, "bfloat16")
    if n_padded != dims[-1]:
        weights = op.nn.pad(weights, [0, 0] * (len(dims) - 1) + [0, n_padded - dims[-1]])
    return op.permute_dims(op.reshape(weights, split), order)


def _kernel(bb, kernels: dict, name: str, make):
    """The GlobalVar of kernel `name` in the module being built, added on first use."""
    if name not in kernels:
        kernels[name] = bb.add_func(make().with_attr("global_symbol", name), name)
    return kernels[name]


def _columns(bb, y, n: int, n_padded: int):
    """`y` without the columns of its last axis past `n` (the padding of whole column blocks)."""
    from tvm import relax

    if n_padded == n:
        return y
    return bb.emit(relax.op.strided_slice(y, axes=[len(_shape(y)) - 1], begin=[0], end=[n]))


def _is_weight(expr, static: set) -> bool:
    import tvm

    return isinstance(expr, tvm.ir.expr.Constant) or expr in static


def _static(dims) -> list | None:
    from tvm import tirx

    return [int(d.value) for d in dims] if all(isinstance(d, tirx.IntImm) for d in dims) else None


def _shape(expr):
    shape = getattr(expr.ty, "shape", None)
    return list(shape.values) if shape is not None and hasattr(shape, "values") else None


def _f32_why(call, x, w) -> str | None:
    dtypes = {str(getattr(x.ty, "dtype", None)), str(getattr(w.ty, "dtype", None))}
    out = getattr(call.attrs, "out_dtype", None)
    if dtypes != {"float32"} or str(out) not in ("float32", "", "None", "void"):
        return "not f32"
    return None
