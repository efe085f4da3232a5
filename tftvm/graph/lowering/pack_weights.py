"""Conv2D and matmul with constant weights, legalized over weights laid out for the tiles.

TVM's own legalization reads NHWC/HWIO weights in place: each register tile of the
default schedule (schedule.py) takes a 32-column slice of every HWIO row, 128 bytes
at a 2 KB stride for 512 channels, and the rest of each row waits for other tiles.
When the weights are cold (a model's are: ResNet50's do not fit in cache) that stride
costs more than the arithmetic. Packed as [C_out / width, KH, KW, C_in, width] with the
schedule's tile width, each tile streams its weights contiguously. The packing is a
constant expression, so Relax's FoldConstant does it once, at compile time; so are weights
computed from constants alone (a frozen graph's batch norm scale folded into them by
fold_scales), which FoldConstant folds with their packing. Weights that are
variables held still between calls (enable()'s inference graphs, memoized) are packed by
`pack_prepared`, in the preparation that runs once.

A matmul's weights [K, N] are packed the same way, by column block [N' / width, K, width],
N' the columns padded with zeros to the widest tile that adds at most a quarter (ResNet50's
1000 classes: 1024 by 32, where 1000 tiles only 8 wide). The product is computed by block
[blocks, rows..., width], every index a plain loop variable, so that the schedule can still
pad a None batch's rows with pad_einsum (which refuses the index j // width of a 2-D product
over packed weights); the same kernel puts the columns back in place as it writes them,
with the bias and activation after them. In TVM's layout each tile reads 128 bytes of every
K-row, rows 4 KB or more apart, and a Dense layer's weights are cold on every call.
"""
from __future__ import annotations


def legalize_map() -> dict:
    """For LegalizeOps' customize_legalize_map."""
    return {"relax.nn.conv2d": _conv2d, "relax.matmul": _matmul}


def _conv2d(bb, call):
    import tvm

    default = tvm.ir.Op.get("relax.nn.conv2d").get_attr("FLegalize")
    # Weights computed at run time are not packed here: that would be a pass per call.
    width = _packable(call) if from_constants(bb, call.args[1]) else None
    if width is None:
        return default(bb, call)
    return _packed_conv(bb, call, call.args[0], call.args[1], width)


def _packed_conv(bb, call, data, weights, width: int):
    """`call` (a conv2d) as a packing of `weights` and a conv over the packed weights."""
    attrs = call.attrs
    packed = bb.emit_te(_pack, weights, width, primfunc_name_hint="pack_weights")
    out_dtype = call.ty.dtype  # the attribute's out_dtype, or the data's where that is unset
    return bb.call_te(_conv2d_packed, data, packed, [int(s) for s in attrs.strides],
                      [int(p) for p in attrs.padding], [int(d) for d in attrs.dilation], str(out_dtype),
                      primfunc_name_hint="conv2d")  # fmt: skip


def _matmul(bb, call):
    import tvm

    default = tvm.ir.Op.get("relax.matmul").get_attr("FLegalize")
    tiles = _matmul_tiles(call) if from_constants(bb, call.args[1]) else None
    if tiles is None:
        return default(bb, call)
    return _packed_matmul(bb, call, call.args[0], call.args[1], *tiles)


def from_constants(bb, expr) -> bool:
    """Whether `expr` is a constant or computed from constants alone (by bindings that
    `bb` knows: a batch norm's scale folded into a frozen graph's weights, fold_scales), so
    that FoldConstant, after legalization, folds its packing with it: packed once, at compile
    time. The bindings are walked back with a stack, not by recursion: a decoder's chain of
    activations is longer than Python's recursion limit."""
    from tvm import relax

    stack = [expr] if isinstance(expr, relax.Var) else list(relax.analysis.free_vars(expr))
    seen = set()
    while stack:
        var = stack.pop()
        if var in seen:
            continue
        seen.add(var)
        try:
            value = bb.lookup_binding(var)
        except Exception:  # TVM raises its own error types for a var it has no binding of
            value = None
        if value is None:  # a param, or a var bb has no binding of
            return False
        stack.extend(relax.analysis.free_vars(value))
    return True


def _packed_matmul(bb, call, data, weights, padded: int, width: int):
    """`call` (a matmul) as a packing of `weights` [K, N] into column blocks [padded / width,
    K, width], a product by block [blocks, rows..., width] and its columns put back in place."""
    packed = bb.emit_te(_pack_columns, weights, padded, width, primfunc_name_hint="pack_weights")
    return bb.call_te(_matmul_by_blocks, data, packed, int(weights.ty.shape[1]), str(call.ty.dtype),
                      primfunc_name_hint="matmul")  # fmt: skip


def _matmul_tiles(call) -> tuple[int, int] | None:
    """(padded columns, tile width) to pack a matmul's 2-D static weights by, or None where
    TVM's legalization stays. The widest tile where padding the columns to it adds at most a
    quarter (register_tiles.padded_columns: 1000 columns pack as 1024 by 32, not by 8)."""
    from tvm import tirx

    from ...schedule import padded_columns, tile_width, vector_lanes

    shape, data_shape = call.args[1].ty.shape, call.args[0].ty.shape
    if shape is None or len(shape) != 2 or not all(isinstance(d, tirx.IntImm) for d in shape):
        return None
    if data_shape is None or len(data_shape) < 2 or not str(call.ty.dtype).startswith("float"):
        return None
    cols, lanes = int(shape[1]), vector_lanes(str(call.ty.dtype))
    padded = cols if tile_width(cols, lanes) == 2 * lanes else padded_columns(cols, lanes) or cols
    width = tile_width(padded, lanes)
    return None if width is None else (padded, width)


def _pack_columns(weights, padded: int, width: int):
    from tvm import te, tirx

    k, n = weights.shape
    return te.compute((padded // width, k, width),
                      lambda o, r, i: tirx.if_then_else(o * width + i < n, weights[r, o * width + i],
                                                        tirx.const(0, weights.dtype)),
                      name="packed_weights")  # fmt: skip


def _matmul_by_blocks(data, packed, n: int, out_dtype: str):
    """The product by column block [blocks, rows..., width] (whole blocks: each tile reads one
    block's contiguous weights), then its first `n` columns in place [rows..., n]."""
    from tvm import te

    blocks, depth, width = packed.shape
    r = te.reduce_axis((0, depth), "k")
    product = te.compute(
        (blocks, *data.shape[:-1], width),
        lambda o, *i: te.sum(data[(*i[:-1], r)].astype(out_dtype) * packed[o, r, i[-1]].astype(out_dtype), axis=r),
        name="matmul")  # fmt: skip
    return te.compute((*data.shape[:-1], n), lambda *i: product[(i[-1] // width, *i[:-1], i[-1] % width)],
                      name="T_unpack")  # fmt: skip


def pack_prepared(mod, weights: list[int]):
    """`mod` with the conv2d and matmul whose weights come from main's params at `weights` (and
    constants) alone legalized over packed weights, the packing a binding of its own:
    LiftTransformParams then moves it into the weight preparation, so a model whose weights
    are held still between calls packs them once (memoized), as a frozen model's are packed
    at compile time."""
    import tvm
    from tvm import relax

    from .fold_scales import weight_derived

    main = mod["main"]
    static = weight_derived(main, weights)

    @relax.expr_functor.mutator
    class Packer(relax.PyExprMutator):
        def visit_call_(self, call):
            if getattr(call.op, "name", "") == "relax.nn.conv2d" and call.args[1] in static and call.args[0] not in static:
                width = _packable(call)
                if width is not None:
                    return _packed_conv(self.builder_, call, self.visit_expr(call.args[0]),
                                        self.visit_expr(call.args[1]), width)  # fmt: skip
            if getattr(call.op, "name", "") == "relax.matmul" and call.args[1] in static and call.args[0] not in static:
                tiles = _matmul_tiles(call)
                if tiles is not None:
                    return _packed_matmul(self.builder_, call, self.visit_expr(call.args[0]),
                                          self.visit_expr(call.args[1]), *tiles)  # fmt: skip
            return super().visit_call_(call)

    packer = Packer(mod)
    packed = packer.visit_expr(main)
    out = tvm.IRModule(dict(packer.builder_.get().functions))
    out["main"] = packed
    return out


def _packable(call) -> int | None:
    """The tile width to pack a conv2d's weights by, or None where TVM's legalization stays."""
    from tvm import tirx

    from ...schedule import tile_width, vector_lanes

    attrs, weights = call.attrs, call.args[1]
    if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NHWC", "HWIO", "NHWC") or int(attrs.groups) != 1:
        return None
    shape = weights.ty.shape
    if shape is None or not all(isinstance(d, tirx.IntImm) for d in shape):
        return None
    return tile_width(int(shape[3]), vector_lanes(str(call.ty.dtype)))


def _pack(weights, width: int):
    from tvm import te

    kh, kw, ci, co = weights.shape
    return te.compute((co // width, kh, kw, ci, width), lambda o, y, x, c, i: weights[y, x, c, o * width + i],
                      name="packed_weights")  # fmt: skip


def _conv2d_packed(data, packed, strides, padding, dilation, out_dtype: str):
    """NHWC conv2d of `data` with weights packed as [C_out / width, KH, KW, C_in, width]."""
    from tvm import te, topi

    n, h, w, ci = data.shape
    blocks, kh, kw, _, width = packed.shape
    (sh, sw), (dh, dw) = strides, dilation
    top, left, bottom, right = padding
    padded = topi.nn.pad(data, [0, top, left, 0], [0, bottom, right, 0], name="pad_temp")
    out_h = (h + top + bottom - (kh - 1) * dh - 1) // sh + 1
    out_w = (w + left + right - (kw - 1) * dw - 1) // sw + 1
    ry, rx, rc = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx"), te.reduce_axis((0, ci), "rc")
    return te.compute(
        (n, out_h, out_w, blocks * width),
        lambda b, y, x, c: te.sum(
            padded[b, y * sh + ry * dh, x * sw + rx * dw, rc].astype(out_dtype)
            * packed[c // width, ry, rx, rc, c % width].astype(out_dtype), axis=[ry, rx, rc]),
        name="conv2d_nhwc")  # fmt: skip

