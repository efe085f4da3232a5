"""Converters for TF's gather/scatter, segment, sort/scan, range and shape-broadcast ops."""
from __future__ import annotations

import numpy as np

from tvm import relax

from ..helpers import checked_axis, dims_equal, shape_operand, simplify, static_dims
from ..registry import ShapeValue, Unsupported, register_converter


def _is_int(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


def _check_bad_indices_policy(ctx, node, allowed=("", "DEFAULT", "ERROR")):
    policy = ctx.attr(node, "bad_indices_policy", "")
    if policy not in allowed:
        raise Unsupported(f"{node.op} with bad_indices_policy {policy}")


def checked_indices(ctx, node, indices, dims, bounded_by=None, axes=None, indices_name="indices",
                    negatives_pass=False):  # fmt: skip
    """`indices` as they are, after a kernel that fails the call (TVM's IndexError, which
    TvmCall and compile_model raise as TF's InvalidArgumentError) unless each lies in
    [0, dim). TF's CPU kernels raise on such an index; one clamped instead would give a
    silent wrong answer (an out-of-vocabulary token's embedding).

    `dims` holds one bound for every element, or one per coordinate along the last axis of
    `indices` (TF's layout for GatherNd and the scatters): ints, or the dims `axes` (default
    0, 1, ...) of `bounded_by`, a (Relax tensor, its name in messages). The kernel then takes
    that tensor as an input of its own: a prim func's symbolic dims must come from its buffers
    (call_te names them afresh). With `negatives_pass`, only the upper bound is checked
    (UnsortedSegment* drops negative ids)."""
    from tvm import tirx

    axes = list(axes or range(len(dims)))
    static = [int(d) if isinstance(d, (int, tirx.IntImm)) else None for d in dims]
    texts = [str(d) if d is not None else f"dim {a} of '{bounded_by[1]}'" for d, a in zip(static, axes)]
    shaped_inputs = [] if all(d is not None for d in static) else [bounded_by[0]]

    def check(idx, *shaped):
        def body(ins, outs):
            per_coordinate = len(dims) > 1
            loops = [tirx.Var(f"i{k}", "int64") for k in range(len(idx.shape) - per_coordinate)]
            stmts = []
            for c, (dim, axis, text) in enumerate(zip(static, axes, texts)):
                at = [*loops, tirx.const(c, "int64")] if per_coordinate else loops
                value = tirx.Cast("int64", tirx.BufferLoad(ins[0], at))
                inside = value < tirx.Cast("int64", shaped[0].shape[axis] if dim is None else dim)
                if not negatives_pass:
                    inside = tirx.all(value >= tirx.const(0, "int64"), inside)
                where = f"coordinate {c} of " if per_coordinate else ""
                low = "" if negatives_pass else "0, "
                message = f"{node.op} '{node.name}': {where}an index in '{indices_name}' is not in [{low}{text})"
                stmts.append(_index_error_unless(inside, message))
                stmts.append(tirx.BufferStore(outs[0], tirx.BufferLoad(ins[0], at), at))
            return _loop_nest(loops, idx.shape, tirx.SeqStmt(stmts))

        return _checking_copy(idx, shaped, body, "checked_indices")

    return _emit_opaque(ctx, check, indices, *shaped_inputs)


def checked_nonempty(ctx, node, x, axis: int):
    """`x` as it is (a copy), after an assertion that fails the call where its dim `axis` is 0
    when the call runs: an IndexError (no index to give), raised as TF's InvalidArgumentError
    as for a bad index. For a symbolic dim only: the copy costs a pass over `x`."""
    from tvm import tirx

    def check(t):
        def body(ins, outs):
            nonempty = tirx.Cast("int64", ins[0].shape[axis]) > tirx.const(0, "int64")
            loops = [tirx.Var(f"i{k}", "int64") for k in range(len(t.shape))]
            copy = _loop_nest(loops, t.shape, tirx.BufferStore(outs[0], tirx.BufferLoad(ins[0], loops), loops))
            message = f"{node.op} '{node.name}': axis {axis} of its input is empty"
            return tirx.SeqStmt([_index_error_unless(nonempty, message), copy])

        return _checking_copy(t, [], body, "checked_nonempty")

    return _emit_opaque(ctx, check, x)


def _index_error_unless(condition, message: str):
    """A TIR assertion failing the call with an IndexError and `message` unless `condition`.
    (TVM 0.27's Python AssertStmt names its first two arguments (kind, condition) but hands
    them on in the C++ constructor's order, (condition, kind).)"""
    import tvm
    from tvm import tirx

    return tirx.AssertStmt(condition, tvm.ir.expr.StringImm("IndexError"), [tvm.ir.expr.StringImm(message)])


def _loop_nest(loops, extents, stmt):
    """`stmt` inside serial loops of `loops` (int64 vars) over `extents`, outermost first."""
    from tvm import tirx

    for var, extent in reversed(list(zip(loops, extents))):
        stmt = tirx.For(var, tirx.const(0, "int64"), tirx.Cast("int64", extent), tirx.ForKind.SERIAL, stmt)
    return stmt


def _checking_copy(source, shaped, body, name: str):
    """A te.extern copying `source` (and reading `shaped` for their dims) by `body`, on
    buffers of its own: te.extern's default ones have a free element offset, which tftvm's
    kernels refuse."""
    from tvm import te, tirx

    buffers = [tirx.decl_buffer(t.shape, t.dtype, f"in{i}") for i, t in enumerate([source, *shaped])]
    return te.extern(source.shape, [source, *shaped], body, dtype=str(source.dtype), name=name,
                     in_buffers=buffers, out_buffers=[tirx.decl_buffer(source.shape, source.dtype, "checked")])  # fmt: skip


def _emit_opaque(ctx, compute, *args):
    # Opaque (TVM's OpPatternKind 8): a kernel of its own, which FuseOps leaves unfused.
    return ctx.bb.emit(ctx.bb.call_te(compute, *args, primfunc_attrs={"op_pattern": 8}))


@register_converter("GatherNd")
def _gather_nd(ctx, node, params, indices):
    _check_bad_indices_policy(ctx, node)
    # Relax takes TF's layout (the last axis of indices holds each coordinate), in int64 only.
    from tvm import te, tirx

    if not isinstance(indices.ty.shape[-1], tirx.IntImm):
        raise Unsupported("GatherNd with a symbolic index depth")
    dims = list(params.ty.shape)[: int(indices.ty.shape[-1])]
    indices = checked_indices(ctx, node, indices, dims, (params, "params"))

    def in_bounds(p, idx):
        """Each coordinate clamped into its dim of `params` as well: the check above raises
        first, and the gather must never read outside `params` whatever reaches it."""
        def clamp(*i):
            high = tirx.const(0, "int64")
            for c in range(int(idx.shape[-1])):
                high = tirx.Select(i[-1] == c, tirx.Cast("int64", p.shape[c]) - 1, high)
            return tirx.max(tirx.min(tirx.Cast("int64", idx(*i)), high), tirx.const(0, "int64"))

        return te.compute(idx.shape, clamp, name="in_bounds")

    return relax.op.gather_nd(params, ctx.bb.call_te(in_bounds, params, indices))


def _scatter(ctx, indices, updates, lead, mode: str, identity):
    """A tensor of shape `lead` + the trailing dims of `updates`, filled with `identity`, into
    which `updates` are combined (add, mul, max or min) at TF-layout `indices` (last axis:
    coordinates), in index order as TF does. A coordinate outside `lead` combines `identity`
    instead: TF drops or rejects it, and the kernel must never write out of bounds."""
    from tvm import te, tirx, topi

    def kernel(idx, upd):
        batch, m = list(idx.shape[:-1]), len(lead)

        def inside(*y):
            return tirx.all(*[tirx.all(idx(*y, c) >= 0, idx(*y, c) < lead[c]) for c in range(m)])

        ok = te.compute(batch, inside, name="inside")
        zero, fill = tirx.const(0, idx.dtype), tirx.const(identity, upd.dtype)
        # topi wants the coordinate axis first (Relax's own scatter_nd transposes the same way).
        coords = te.compute([m] + batch, lambda c, *y: tirx.Select(ok(*y), idx(*y, c), zero), name="coords")
        safe = te.compute(upd.shape, lambda *i: tirx.Select(ok(*i[: len(batch)]), upd(*i), fill), name="safe")
        out = topi.full(list(lead) + list(upd.shape[len(batch):]), upd.dtype, fill)
        return topi.scatter_nd(out, coords, safe, mode)

    return ctx.bb.call_te(kernel, indices, updates)


@register_converter("ScatterNd", constant_inputs=(2,))
def _scatter_nd(ctx, node, indices, updates, shape):
    # Out-of-range indices are skipped, which is also what bad_indices_policy IGNORE asks for.
    _check_bad_indices_policy(ctx, node, ("", "DEFAULT", "ERROR", "IGNORE"))
    shape = [int(d) for d in np.asarray(ctx.constant(node, 2)).reshape(-1)]
    batch, m = list(indices.ty.shape)[:-1], int(indices.ty.shape[-1])
    if not dims_equal(batch + shape[m:], list(updates.ty.shape)):
        raise Unsupported("ScatterNd whose updates' dims are not provably indices' and shape's (TF "
                          "checks them at run time; the kernel would read past updates)")  # fmt: skip
    if ctx.attr(node, "bad_indices_policy", "") != "IGNORE":  # TF's CPU kernel raises by default
        indices = checked_indices(ctx, node, indices, shape[:m])
    return _scatter(ctx, indices, updates, shape[:m], "add", 0)  # TF adds duplicate indices


_TENSOR_SCATTER_MODES = {"Update": "update", "Add": "add", "Sub": "add", "Max": "max", "Min": "min"}


@register_converter(*(f"TensorScatter{kind}" for kind in _TENSOR_SCATTER_MODES))
def _tensor_scatter(ctx, node, tensor, indices, updates):
    """A copy of `tensor` with `updates` written (or added, subtracted, maxed, minned) at
    TF-layout `indices`, in index order as TF's CPU kernel does (the last of duplicate indices
    wins an Update). An index outside `tensor` raises, as in TF."""
    from tvm import te, tirx, topi

    _check_bad_indices_policy(ctx, node)
    if len(indices.ty.shape) < 2:  # TF's kernel then checks shapes by rules of its own
        raise Unsupported(f"{node.op} with indices of rank {len(indices.ty.shape)}, not 2 or more")
    if not isinstance(indices.ty.shape[-1], tirx.IntImm):
        raise Unsupported(f"{node.op} with a symbolic index depth")
    m, batch = int(indices.ty.shape[-1]), list(indices.ty.shape)[:-1]
    if m > len(tensor.ty.shape) or not dims_equal(batch + list(tensor.ty.shape)[m:], list(updates.ty.shape)):
        raise Unsupported(f"{node.op} whose updates' dims are not provably indices' and tensor's (TF "
                          "checks them at run time; the kernel would read past updates)")  # fmt: skip
    indices = checked_indices(ctx, node, indices, list(tensor.ty.shape)[:m], (tensor, "tensor"))
    kind = node.op.removeprefix("TensorScatter")
    if kind == "Sub":
        updates = ctx.bb.emit(relax.op.negative(updates))

    def kernel(t, idx, upd):
        # topi wants the coordinate axis first; copies made in the kernel keep its extern's
        # parameters dense (te.extern's own buffers have a free element offset).
        coords = te.compute([m, *idx.shape[:-1]], lambda c, *y: idx(*y, c), name="coords")
        return topi.scatter_nd(topi.identity(t), coords, topi.identity(upd), _TENSOR_SCATTER_MODES[kind])

    return ctx.bb.call_te(kernel, tensor, indices, updates)


def _dtype_limits(dtype: str):
    import tensorflow as tf

    t = tf.as_dtype(dtype)
    return (int(t.min), int(t.max)) if _is_int(dtype) else (float(t.min), float(t.max))


def _reduction(kind: str, dtype: str):
    """(topi scatter mode, identity) of a segment reduction; empty unsorted segments get the
    identity, which is TF's value for them (the dtype's lowest for Max, not -inf)."""
    low, high = _dtype_limits(dtype)
    return {"Sum": ("add", 0), "Mean": ("add", 0), "Prod": ("mul", 1), "Max": ("max", low),
            "Min": ("min", high)}[kind]  # fmt: skip


@register_converter("UnsortedSegmentSum", "UnsortedSegmentProd", "UnsortedSegmentMax", "UnsortedSegmentMin",
                    constant_inputs=(2,))
def _unsorted_segment(ctx, node, data, ids, num_segments):
    num = int(ctx.constant(node, 2))
    k = len(ids.ty.shape)
    if not dims_equal(list(ids.ty.shape), list(data.ty.shape)[:k]):
        raise Unsupported(f"{node.op} whose segment_ids shape is not provably data's leading dims "
                          "(TF checks it at run time; the kernel would read past data)")  # fmt: skip
    mode, identity = _reduction(node.op.removeprefix("UnsortedSegment"), ctx.attr(node, "T"))
    # Negative ids are dropped, as TF does; ids >= num_segments raise, as in TF.
    ids = checked_indices(ctx, node, ids, [num], indices_name="segment_ids", negatives_pass=True)
    return _scatter(ctx, ctx.bb.emit(relax.op.expand_dims(ids, -1)), data, [num], mode, identity)


@register_converter("SegmentSum", "SegmentMean", "SegmentProd", "SegmentMax", "SegmentMin")
def _segment(ctx, node, data, ids):
    try:
        ids = np.asarray(ctx.constant(node, 1))
    except Unsupported:
        raise Unsupported(f"{node.op} with non-constant segment_ids: its output length (largest id "
                          "+ 1) would depend on the data") from None  # fmt: skip
    if ids.ndim != 1 or not ids.size or ids[0] < 0 or np.any(np.diff(ids) < 0):
        raise Unsupported(f"{node.op} segment_ids must be non-empty, non-negative and sorted (TF raises)")
    if static_dims(data, node.op, (0,))[0] != ids.size:
        raise Unsupported(f"{node.op} segment_ids and data's first dim differ (TF raises)")
    kind, dtype = node.op.removeprefix("Segment"), ctx.attr(node, "T")
    num = int(ids[-1]) + 1
    mode, identity = _reduction(kind, dtype)
    out = _scatter(ctx, relax.const(ids.reshape(-1, 1)), data, [num], mode, identity)
    counts = np.bincount(ids, minlength=num).reshape([num] + [1] * (len(data.ty.shape) - 1))
    if kind in ("Max", "Min"):  # TF gives 0, not the identity, for an empty sorted segment
        return relax.op.where(relax.const(counts > 0), out, relax.const(0, dtype))
    if kind == "Mean":  # an empty segment's sum is 0: divide it by 1; ints truncate, as in TF
        return relax.op.divide(out, relax.const(np.maximum(counts, 1).astype(dtype), dtype))
    return out


@register_converter("OneHot", constant_inputs=(1, 2, 3))
def _one_hot(ctx, node, indices, depth, on_value, off_value):
    from tvm import tirx

    dtype = ctx.attr(node, "T")
    on, off = (relax.prim_value(tirx.const(ctx.constant(node, i).item(), dtype)) for i in (2, 3))
    return relax.op.one_hot(indices, on, off, int(ctx.constant(node, 1)), int(ctx.attr(node, "axis", -1)))


def const_range(start, limit, delta, dtype: str):
    """TF's Range on constants: its size rule and start + i * delta, computed in `dtype`."""
    start, limit, delta = (np.asarray(v, dtype).item() for v in (start, limit, delta))
    if delta == 0 or (delta > 0 and start > limit) or (delta < 0 and start < limit):
        raise Unsupported(f"Range({start}, {limit}, {delta}) is empty or infinite (TF raises)")
    t = np.dtype(dtype).type
    if _is_int(dtype):
        size = (abs(limit - start) + abs(delta) - 1) // abs(delta)
    else:
        size = int(np.ceil(np.abs((t(limit) - t(start)) / t(delta))))
    return t(start) + np.arange(size).astype(dtype) * t(delta)


@register_converter("Range")
def _range(ctx, node, start, limit, delta):
    dtype = ctx.attr(node, "Tidx")
    if not isinstance(limit, ShapeValue):
        values = [ctx.constant(node, i) for i in range(3)]
        return relax.const(const_range(*values, dtype))
    if not (_is_int(dtype) and limit.scalar) or any(isinstance(v, ShapeValue) for v in (start, delta)):
        raise Unsupported("Range over a shape value needs an int scalar limit and constant start and delta")
    start, delta = int(ctx.constant(node, 0)), int(ctx.constant(node, 2))
    if (start, delta) != (0, 1):  # other sizes are dim expressions, which lowering/program.py cannot pass yet
        raise Unsupported(f"Range to a symbolic limit needs start 0 and delta 1, got {start}, {delta}")
    return relax.op.arange(0, simplify(limit[0]), 1, dtype)


@register_converter("Cumsum", "Cumprod", constant_inputs=(1,))
def _cumulative(ctx, node, x, axis):
    from tvm import topi

    scan = topi.cumsum if node.op == "Cumsum" else topi.cumprod
    axis = checked_axis(node, int(ctx.constant(node, 1)), len(x.ty.shape))
    exclusive, reverse = bool(ctx.attr(node, "exclusive", False)), bool(ctx.attr(node, "reverse", False))

    def kernel(t):
        # topi.cumsum's extern declares its input with a free element offset, which tftvm
        # refuses; feeding it a copy made in the same kernel keeps the parameters dense.
        t = topi.flip(t, axis) if reverse else topi.identity(t)
        out = scan(t, axis, None, exclusive)
        return topi.flip(out, axis) if reverse else out

    return ctx.bb.call_te(kernel, x)  # relax.op.cumsum/cumprod would need DispatchSortScan, which fuse() skips


@register_converter("UnravelIndex", constant_inputs=(1,))
def _unravel_index(ctx, node, indices, dims):
    """Coordinates of flat indices into `dims`: (index / stride) % dim per dim, one row
    each (a scalar index gives a vector). An index from the product of dims on raises, as in
    TF; a negative one passes, divided and taken modulo as C does (TF's kernel does not check
    it). An empty vector of indices raises, as in TF: a static one stays in TF, a symbolic one
    is checked when the call runs."""
    shape = [int(d) for d in np.asarray(ctx.constant(node, 1)).reshape(-1)]
    if not shape or min(shape) <= 0:
        raise Unsupported(f"UnravelIndex into dims {shape} (TF raises for a dim below 1)")
    if len(indices.ty.shape) == 1:
        (length,) = static_dims(indices, "UnravelIndex", ())
        if length == 0:
            raise Unsupported("UnravelIndex of an empty vector of indices (TF raises)")
        if length is None:
            indices = checked_nonempty(ctx, node, indices, 0)
    dtype = str(indices.ty.dtype)
    strides = np.cumprod([1] + shape[:0:-1])[::-1]
    if strides[0] * shape[0] > np.iinfo(dtype).max:
        raise Unsupported(f"UnravelIndex into dims {shape}: their product overflows {dtype}")
    indices = checked_indices(ctx, node, indices, [int(strides[0] * shape[0])], negatives_pass=True)
    column = [len(shape)] + [1] * len(indices.ty.shape)
    op = relax.op  # divide and mod of ints round toward zero, as C's / and %
    quotient = op.divide(op.expand_dims(indices, 0), relax.const(strides.reshape(column), dtype))
    return op.mod(quotient, relax.const(np.array(shape).reshape(column), dtype))


# What TVM's sort library handles (it raises for int16 and misreads bfloat16 as another type).
_TOPK_DTYPES = {"float16", "float32", "float64", "int8", "uint8", "int32", "int64"}


@register_converter("TopKV2", constant_inputs=(1,), dtypes=_TOPK_DTYPES)  # TVM's sort library sorts these
def _top_k(ctx, node, x, k):
    from tvm import topi

    if not ctx.attr(node, "sorted", True):
        raise Unsupported("TopKV2 with sorted=False: TF then returns its heap's order, not a sorted one")
    k, n = int(ctx.constant(node, 1)), static_dims(x, "TopKV2", (len(x.ty.shape) - 1,))[-1]
    if not 1 <= k <= n:  # TF raises for k > n; TVM reads k < 1 as "all"
        raise Unsupported(f"TopKV2 with k={k} outside [1, {n}]")
    both = ctx.bb.emit(ctx.bb.call_te(topi.topk, x, k=k, axis=-1, ret_type="both", is_ascend=False,
                                    dtype=ctx.attr(node, "index_type", "int32")))  # fmt: skip
    return [relax.TupleGetItem(both, 0), relax.TupleGetItem(both, 1)]


@register_converter("Where", data_dependent_shape=True)
def _where(ctx, node, x):
    """The coordinates of the true (for numbers: nonzero; NaN counts) elements of `x`, in
    row-major order, as an int64 [count, rank] tensor: Relax's nonzero (ONNX's, [rank, count])
    transposed. The count is the data's, so only compile_model's VM, which allocates such a
    result, runs it (see Requirements.data_dependent_shape)."""
    from tvm import tirx

    rank = len(x.ty.shape)
    if rank == 0:
        raise Unsupported("Where of a scalar")
    dtype = str(x.ty.dtype)
    mask = x if dtype == "bool" else relax.op.not_equal(x, relax.const(0, dtype))
    coordinates = ctx.bb.emit(relax.op.nonzero(mask))
    count = tirx.Var("where_count", "int64")
    coordinates = ctx.bb.match_cast(coordinates, relax.TensorType([rank, count], "int64"))
    return relax.op.permute_dims(coordinates, [1, 0])


@register_converter("Unpack")
def _unpack(ctx, node, x):
    if isinstance(x, ShapeValue):  # tf.unstack(tf.shape(x)): one scalar dim each
        return [ShapeValue([d], scalar=True) for d in x]
    op, axis = relax.op, int(ctx.attr(node, "axis", 0)) % len(x.ty.shape)
    pieces = [op.strided_slice(x, [axis], [i], [i + 1]) for i in range(ctx.attr(node, "num"))]
    return [op.squeeze(p, [axis]) for p in pieces]


@register_converter("BroadcastTo")
def _broadcast_to(ctx, node, x, shape):
    dims = shape_operand(ctx, node, 1, shape)
    return relax.op.broadcast_to(x, [simplify(d) for d in dims])


@register_converter("Round")
def _round(ctx, node, x):
    if _is_int(ctx.attr(node, "T")):  # tf.round passes ints through without a Round node
        raise Unsupported("Round of integers: TF's CPU kernel returns zeros for them, not its input")
    return relax.op.round(x)  # rounds half to even, as TF does (the tests check every .5)


@register_converter("GatherV2", constant_inputs=(2,))
def _gather(ctx, node, params, indices, axis):
    axis = int(ctx.constant(node, 2))
    if ctx.attr(node, "batch_dims", 0):
        raise Unsupported("GatherV2 with batch_dims")
    if isinstance(params, ShapeValue):
        idx = np.asarray(ctx.constant(node, 1))
        picked = [params[int(i)] for i in idx.reshape(-1)]
        return ShapeValue(picked, scalar=idx.ndim == 0)
    axis %= len(params.ty.shape)
    indices = checked_indices(ctx, node, indices, [params.ty.shape[axis]], (params, "params"), [axis])
    # Clipped as well, not TVM's default unchecked "fast" mode: the check above raises first,
    # and the gather must never read outside `params` whatever reaches it.
    return relax.op.take(params, indices, axis=axis, mode="clip")


@register_converter("XlaDynamicUpdateSlice")
def _dynamic_update_slice(ctx, node, x, update, indices):
    """`update` written into a copy of `x` at `indices` (one start per axis, computed at run
    time: a decoder's KV-cache update at the current position, Keras' ops.slice_update).
    XLA's rule: each start is clamped so that the update fits inside `x`."""
    from tvm import te, tirx

    rank = len(x.ty.shape)
    if len(update.ty.shape) != rank or indices.ty.shape is None or len(indices.ty.shape) != 1:
        raise Unsupported("XlaDynamicUpdateSlice needs an update of the input's rank and one start per axis")
    if rank == 0:
        return update
    for u, d in zip(update.ty.shape, x.ty.shape):
        # The kernel reads the update at a clamped index wherever it writes: an update that may
        # be empty while the input is not (a symbolic dim of its own) would be read outside.
        if not (isinstance(u, tirx.IntImm) and int(u) >= 1 or dims_equal([u], [d])):
            raise Unsupported(f"XlaDynamicUpdateSlice of an update with dim {u} (it may be 0) into dim {d}")

    def kernel(operand, upd, idx):
        starts = [tirx.max(tirx.min(tirx.Cast("int64", idx[a]), tirx.Cast("int64", operand.shape[a] - upd.shape[a])),
                           tirx.const(0, "int64")) for a in range(rank)]  # fmt: skip

        def value(*i):
            inside = tirx.all(*[tirx.all(i[a] >= starts[a], i[a] < starts[a] + upd.shape[a]) for a in range(rank)])
            # The update's index clamped too: a vectorized select reads both sides.
            at = [tirx.max(tirx.min(i[a] - starts[a], tirx.Cast("int64", upd.shape[a]) - 1), tirx.const(0, "int64"))
                  for a in range(rank)]  # fmt: skip
            return tirx.Select(inside, upd(*at), operand(*i))

        return te.compute(operand.shape, value, name="dynamic_update_slice")

    return ctx.bb.call_te(kernel, x, update, indices)
