"""precision="bf16": matmuls and convs in bf16 with f32 accumulation, on the CPU's matrix units.

The rule: a product runs in bf16 only where the CPU has bf16 instructions that a kernel here
uses: AMX tiles (cpu.amx, Intel Sapphire Rapids and later), else AVX512-BF16's VDPBF16PS
(cpu.avx512_bf16, Zen 4 and Cooper Lake); elsewhere it stays f32, since bf16 values fed to
f32 FMAs only add conversions. Both units read the same packed weights (cpu.vnni_layout).
The products it takes: a matmul of f32 activations [..., k] by f32 weights [k, n] (a Dense
layer, a projection), and an NHWC conv of f32 weights without groups (a 1x1 conv of stride 1
without padding as the same matmul over pixels, others as a conv), with k (the input
channels) padded with zeros to the unit's step (AMX: 32, AVX512-BF16: 2) where that at most
doubles the multiplies (`_reduction`), and static image sizes. Its activations are rounded
to bf16 as they enter (the cast fuses into the kernel that makes them; a conv's padding with
it) and its weights once (a constant expression: Relax folds it, or LiftTransformParams
lifts it out of the call when the weights are variables), packed in the order the tiles
read. Results stay f32: the elementwise ops between products (bias, activations, norms,
softmax) run in f32, as oneDNN's and OpenVINO's bf16 modes do, and the error is the rounding
of the products' inputs; the bias, residual and activation right after a product are done by
its kernel, which writes bf16 where every reader reads bf16 anyway (post_op_fusion.py).
"""
from __future__ import annotations

import dataclasses
import logging

from . import post_op_fusion
from .bindings import shape_of, static_dims

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
    units: str = ""  # what the bf16 products run on ("AMX-BF16", "AVX512-BF16"), "" where none
    products: int = 0  # matmuls and convs seen
    in_bf16: int = 0  # of those, how many run in bf16
    post_ops: int = 0  # of those, how many write their results through their bias, residual add and activation
    bf16_outputs: int = 0  # of those, how many write bf16, all their readers reading bf16
    left: list = dataclasses.field(default_factory=list)  # (op, why) for each product left in f32

    def text(self) -> str:
        if self.precision == "f32":
            return "precision: f32"
        if not self.units:
            return "precision: bf16 asked, but this CPU has no bf16 instructions tftvm uses: f32"
        text = f"precision: bf16 on {self.units}: {self.in_bf16} of {self.products} matmuls/convs"
        text += f", {self.post_ops} with their bias (and residual, activation) fused" if self.post_ops else ""
        text += f", {self.bf16_outputs} writing bf16 for readers that read it" if self.bf16_outputs else ""
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
        out.post_ops += r.post_ops
        out.bf16_outputs += r.bf16_outputs
        out.left += r.left
    return out


def to_bf16(mod, target=None, report: PrecisionReport | None = None, weights=()):
    """`mod` with the eligible products of its functions in bf16 (see the module's rule);
    `report`, if given, is filled in. Weights are constants, or what `main` computes from
    its params at the indices `weights` (a model's variables) alone."""
    import tvm
    from tvm import relax

    from .fold_scales import weight_derived

    report = report if report is not None else PrecisionReport()
    report.precision = "bf16"
    unit = _unit(target)
    if unit is None:
        return mod
    report.units = unit.name
    kernels = {}  # the bf16 kernels added: name -> (GlobalVar, make(post ops) -> PrimFunc)
    static = weight_derived(mod["main"], weights)  # computed from constants and weight params alone

    @relax.expr_functor.mutator
    class Products(relax.PyExprMutator):
        def visit_call_(self, call):
            call = self.visit_expr_post_order(call)
            name = getattr(call.op, "name", "")
            if name not in ("relax.matmul", "relax.nn.conv2d"):
                return call
            report.products += 1
            plan = _matmul_plan(call, unit) if name == "relax.matmul" else _conv_plan(call, unit)
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
    out = tvm.IRModule(dict(rewriter.builder_.get().functions))
    return relax.transform.DeadCodeElimination()(post_op_fusion.fuse(out, dict(kernels.values()), report))


@dataclasses.dataclass(frozen=True)
class _Unit:
    name: str  # the instructions, as the report says them
    prefix: str  # of its kernels' names
    kernels: object  # the module with its matmul_bf16, conv2d_bf16 and K_STEP


def _unit(target) -> _Unit | None:
    """The bf16 unit kernels for `target` use: AMX where the CPU has it, else AVX512-BF16."""
    from ...cpu import amx, avx512_bf16, features

    if features.amx_bf16(target):
        return _Unit("AMX-BF16", "amx", amx)
    if features.avx512_bf16(target):
        return _Unit("AVX512-BF16", "avx512", avx512_bf16)
    return None


def bf16_units(target=None) -> str:
    """What precision="bf16" runs products on for `target` (None: this host): "AMX-BF16",
    "AVX512-BF16", or "" where neither (the products stay f32)."""
    unit = _unit(target)
    return unit.name if unit else ""


def _matmul_plan(call, unit: _Unit):
    """How a matmul runs on `unit` (a function of the block builder and the kernels added),
    or why it does not."""
    x, w = call.args
    why = _f32_why(call, x, w)
    if why:
        return why
    x_dims, w_dims = shape_of(x), shape_of(w)
    if x_dims is None or w_dims is None or len(w_dims) != 2 or len(x_dims) < 2:
        return "not activations [..., k] by weights [k, n]"
    if static_dims(w_dims) is None:
        return "weights of symbolic shape"
    k, n = static_dims(w_dims)
    k_run = _reduction(k, unit)
    if isinstance(k_run, str):
        return k_run
    return lambda bb, kernels: _matmul_call(bb, kernels, unit, x, w, (k, k_run), n, x_dims[:-1] + [n])


def _conv_plan(call, unit: _Unit):
    """How an NHWC conv runs on `unit`: a 1x1 conv of stride 1 unpadded as a matmul over its
    pixels, any other as a conv; or why it does not."""
    from tvm import relax

    x, w = call.args
    attrs = call.attrs
    why = _f32_why(call, x, w)
    if why:
        return why
    if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NHWC", "HWIO", "NHWC"):
        return "a conv in another layout than NHWC"
    if int(attrs.groups) != 1:
        return "a grouped or depthwise conv"
    x_dims, w_dims = shape_of(x), static_dims(shape_of(w) or [None])
    if w_dims is None or x_dims is None or static_dims(x_dims[1:]) is None:
        return "a conv of symbolic image or window size"
    kh, kw, k, n = w_dims
    k_run = _reduction(k, unit)
    if isinstance(k_run, str):
        return k_run
    strides, padding = [int(s) for s in attrs.strides], [int(p) for p in attrs.padding]
    if (kh, kw) == (1, 1) and strides == [1, 1] and padding == [0, 0, 0, 0]:
        out_dims = x_dims[:-1] + [n]
        w = relax.op.reshape(w, [k, n])
        return lambda bb, kernels: _matmul_call(bb, kernels, unit, x, w, (k, k_run), n, out_dims)
    dilation = [int(d) for d in attrs.dilation]
    return lambda bb, kernels: _conv_call(bb, kernels, unit, x, w, (kh, kw, k, n), k_run, strides, padding, dilation)


def _reduction(k: int, unit: _Unit) -> int | str:
    """The k that `unit`'s kernels run a product of k at: k, or k padded with zeros (in the
    activations and the weights) to whole steps of the unit, where that at most doubles the
    multiplies (AMX: 48 -> 64, 144 -> 160, 16 -> 32; not 8 -> 32: an f32 product of 8 terms
    is cheap); else why the product stays f32."""
    step = unit.kernels.K_STEP
    k_run = -(-k // step) * step
    return k_run if k_run <= 2 * k else f"k = {k}, under half of {unit.name}'s step of {step}"


def _matmul_call(bb, kernels: dict, unit: _Unit, x, w, ks: tuple, n: int, out_dims):
    """x [..., k] · w [k, n] as `unit`'s matmul kernel's call: x rounded to bf16, padded to
    `k_run` (ks = (k, k_run)) and seen as [rows, k_run], w rounded, padded to k_run rows and
    whole column blocks and packed; the result [rows, n] f32 (the kernel writes only the
    columns there are) reshaped."""
    from tvm import relax

    from ...cpu import vnni_layout

    op, emit = relax.op, bb.emit
    k, k_run = ks
    n_padded = vnni_layout.padded_columns(n)
    rows = 1
    for d in out_dims[:-1]:
        rows = rows * d
    a = op.astype(x, "bfloat16")
    if k_run != k:
        a = op.nn.pad(a, [0, 0] * (len(out_dims) - 1) + [0, k_run - k])
    a = emit(op.reshape(a, [rows, k_run]))
    packed = emit(_packed(w, [k, n], k_run, n_padded, [k_run // 2, 2, n_padded // 16, 16], [2, 0, 3, 1]))
    kernel = _kernel(bb, kernels, f"{unit.prefix}_matmul_bf16_{k_run}x{n}",
                     lambda post: unit.kernels.matmul_bf16(k_run, n, post))
    y = emit(relax.call_tir(kernel, [a, packed], relax.TensorType([rows, n], "float32")))
    return op.reshape(y, out_dims)


def _conv_call(bb, kernels: dict, unit: _Unit, x, w, hwio, k_run: int, strides, padding, dilation):
    """An NHWC conv as `unit`'s conv kernel's call: x rounded to bf16 and padded (its image
    by `padding`, its channels to `k_run`), w rounded, padded to k_run input channels and
    whole output-channel blocks and packed; the result f32 (the kernel writes only the
    channels there are)."""
    from tvm import relax

    from ...cpu import vnni_layout

    op, emit = relax.op, bb.emit
    kh, kw, k, n = hwio
    batch, height, width, _ = shape_of(x)
    top, left, bottom, right = padding
    height, width = int(height) + top + bottom, int(width) + left + right
    a = op.astype(x, "bfloat16")
    if any(padding) or k_run != k:
        a = op.nn.pad(a, [0, 0, top, bottom, left, right, 0, k_run - k])
    a = emit(a)
    n_padded = vnni_layout.padded_columns(n)
    packed = emit(_packed(w, hwio, k_run, n_padded, [kh, kw, k_run // 2, 2, n_padded // 16, 16], [4, 0, 1, 2, 5, 3]))
    name = (f"{unit.prefix}_conv2d_bf16_{height}x{width}x{k_run}x{n}_{kh}x{kw}"
            f"_s{strides[0]}x{strides[1]}_d{dilation[0]}x{dilation[1]}")
    kernel = _kernel(bb, kernels, name, lambda post: unit.kernels.conv2d_bf16(height, width, k_run, n, (kh, kw),
                                                                              strides, dilation, post))
    out_h = (height - (kh - 1) * dilation[0] - 1) // strides[0] + 1
    out_w = (width - (kw - 1) * dilation[1] - 1) // strides[1] + 1
    return relax.call_tir(kernel, [a, packed], relax.TensorType([batch, out_h, out_w, n], "float32"))


def _packed(w, dims: list, k_run: int, n_padded: int, split: list, order: list):
    """Weights `w` (dims [..., k, n]) rounded to bf16, zero-padded to `k_run` along k and
    `n_padded` along n, then reshaped to `split` and permuted by `order`: the kernels' B order."""
    from tvm import relax

    op = relax.op
    weights = op.astype(w, "bfloat16")
    if (k_run, n_padded) != tuple(dims[-2:]):
        weights = op.nn.pad(weights, [0, 0] * (len(dims) - 2) + [0, k_run - dims[-2], 0, n_padded - dims[-1]])
    return op.permute_dims(op.reshape(weights, split), order)


def _kernel(bb, kernels: dict, name: str, make):
    """The GlobalVar of kernel `name` (`make(post ops)` its PrimFunc) in the module being
    built, added on first use."""
    if name not in kernels:
        kernels[name] = (bb.add_func(make(None).with_attr("global_symbol", name), name), make)
    return kernels[name][0]


def _is_weight(expr, static: set) -> bool:
    import tvm

    return isinstance(expr, tvm.ir.expr.Constant) or expr in static


def _f32_why(call, x, w) -> str | None:
    dtypes = {str(getattr(x.ty, "dtype", None)), str(getattr(w.ty, "dtype", None))}
    out = getattr(call.attrs, "out_dtype", None)
    if dtypes != {"float32"} or str(out) not in ("float32", "", "None", "void"):
        return "not f32"
    return None
