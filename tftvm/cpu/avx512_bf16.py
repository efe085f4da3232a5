"""A bf16 matmul and conv on AVX512-BF16's VDPBF16PS, f32 accumulation (Zen 4, Cooper Lake).

VDPBF16PS takes 16 f32 lanes, 16 pairs of bf16 values and 16 more pairs, and adds each
lane's two products to it. So a kernel reads B packed in pairs along k (vnni_layout.py): one
64-byte row of a 16-column slab is one register. For each pair of k it loads that row of the
block's two slabs and, for each row of A, broadcasts the row's pair (32 bits) to every lane;
a block of ROWS x 32 results stays in 2 * ROWS registers for the whole reduction and is
written once, through its post-ops. ROWS = 14: 28 accumulators, two B rows and a broadcast
take 31 of the 32 zmm registers, and 28 independent sums hide the instruction's latency.

A matmul's rows (m, a symbolic batch included) run in blocks of ROWS, then the rest in blocks
of 8, 4, 2 and 1 rows (one per bit of the rest); a conv's rows are ROWS neighbouring output
pixels of one output row, whose inputs lie a constant stride apart for every window
position, then one block of the row's last pixels. A parallel task is one column block of
a stretch of rows (a matmul) or of one output row (a conv), column blocks outermost, so a
column block's weights stay in cache while its rows pass.

Two things TVM needs told: its bf16 lowering computes bf16 values in f32, so no bf16 vector
reaches LLVM; the instruction is reached through a small LLVM function imported into the
module (`pragma_import_llvm`) that takes the pairs as <16 x i32> and bitcasts them to
<32 x bfloat>, and LLVM inlines it. And a buffer in a parallel loop becomes a heap workspace
unless it is in the global scope and under 1 KiB, so each block's accumulators are two
buffers of ROWS x 16 floats, which LLVM then keeps in registers.
"""
from __future__ import annotations

from .post_ops import PostOps, output_dtype, without_unread_params, written
from .vnni_layout import COLUMN_BLOCK, conv_packed_shape, packed_shape, padded_columns

K_STEP = 2  # bf16 values of k per lane
ROWS = 14  # rows (or output pixels) of a block of results
ROW_CHUNK = 4 * ROWS  # matmul rows a parallel task runs
_DOT = "tftvm_vdpbf16ps"
_LLVM = f"""
declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)
define linkonce_odr <16 x float> @{_DOT}(<16 x float> %acc, <16 x i32> %a, <16 x i32> %b) alwaysinline {{
  %pairs_a = bitcast <16 x i32> %a to <32 x bfloat>
  %pairs_b = bitcast <16 x i32> %b to <32 x bfloat>
  %sum = call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %acc, <32 x bfloat> %pairs_a, <32 x bfloat> %pairs_b)
  ret <16 x float> %sum
}}
"""


def _block(rows: int, reduction: int, a_offset, a_row_stride: int, columns: int, post: PostOps | None):
    """A TVMScript macro computing a block of `rows` x 32 results and writing them through
    `post`, those of its columns under `columns` (the output's; the last block of a count
    that is no multiple of 32 writes fewer). Its args: A and B as flat int32 buffers (a pair
    of bf16 values a lane), the bias, the residual and the output as [rows, columns] views,
    `a_base` (A's first row at the reduction's start), `b_base` (the column block's first slab
    row), the block's first output row and first column. Reduction step p reads pair
    `a_offset(a_base, p)` of A's first row (the next rows `a_row_stride` lanes apart) and row p
    of each slab of B."""
    from tvm.script import tirx as T

    tail = columns % COLUMN_BLOCK  # the last block's columns, where it has fewer than 32

    def dot(acc, r, a, b):
        return T.call_pure_extern("float32x16", _DOT, acc.vload([r, 0], "float32x16"), a, b)

    @T.macro
    def write(low, high, Bias, R2, Y2, out_row, r, column, width):  # the block's first `width` columns of row r
        for j in T.vectorized(min(width, 16)):
            Y2[out_row + r, column + j] = written(post, low[r, j], Bias, R2, (out_row + r, column + j))
        if width > 16:
            for j in T.vectorized(width - 16):
                Y2[out_row + r, column + 16 + j] = written(post, high[r, j], Bias, R2, (out_row + r, column + 16 + j))

    @T.macro
    def block(A1, B1, Bias, R2, Y2, a_base, b_base, out_row, column):
        low = T.decl_buffer((rows, 16), "float32")
        high = T.decl_buffer((rows, 16), "float32")
        for r in T.unroll(rows):
            low[r, T.ramp(0, 1, 16)] = T.broadcast(T.float32(0), 16)
            high[r, T.ramp(0, 1, 16)] = T.broadcast(T.float32(0), 16)
        for p in range(reduction):
            for r in T.unroll(rows):
                pair = T.meta_var(T.broadcast(A1[a_offset(a_base, p) + r * a_row_stride], 16))
                low[r, T.ramp(0, 1, 16)] = dot(low, r, pair, B1.vload([b_base + p * 16], "int32x16"))
                high[r, T.ramp(0, 1, 16)] = dot(high, r, pair, B1.vload([b_base + (reduction + p) * 16], "int32x16"))
        if tail == 0:
            for r in range(rows):
                write(low, high, Bias, R2, Y2, out_row, r, column, COLUMN_BLOCK)
        elif column + COLUMN_BLOCK <= columns:
            for r in range(rows):
                write(low, high, Bias, R2, Y2, out_row, r, column, COLUMN_BLOCK)
        else:
            for r in range(rows):
                write(low, high, Bias, R2, Y2, out_row, r, column, tail)

    return block


def matmul_bf16(k: int, n: int, post: PostOps | None = None):
    """The PrimFunc (A [m, k] bf16, B packed as vnni_layout.packed_shape(k, n) bf16, [bias [n]
    f32, [residual [m, n] f32,]] C [m, n] f32 or `post`'s out_dtype), m symbolic; `k` even;
    `post`: the post-ops on the results (then bias, and residual where it says)."""
    from tvm.script import tirx as T

    assert k % K_STEP == 0, k
    out_dtype = output_dtype(post)
    pairs, column_blocks = k // 2, padded_columns(n) // COLUMN_BLOCK
    full, eight, four, two, one = (_block(rows, pairs, lambda base, p: base + p, pairs, n, post)
                                   for rows in (ROWS, 8, 4, 2, 1))

    @T.prim_func(check_well_formed=False)
    def avx512_matmul_bf16(a: T.handle, b: T.handle, bias: T.handle, residual: T.handle, c: T.handle):
        T.func_attr({"tir.noalias": True})
        m = T.int64()
        A = T.match_buffer(a, (m, k), "bfloat16")
        B = T.match_buffer(b, packed_shape(k, n), "bfloat16")
        Bias = T.match_buffer(bias, (n,), "float32")
        R = T.match_buffer(residual, (m, n), "float32")
        C = T.match_buffer(c, (m, n), out_dtype)
        A1 = T.decl_buffer((m * pairs,), "int32", data=A.data)  # each pair of k one 32-bit lane
        B1 = T.decl_buffer((column_blocks * 2 * pairs * 16,), "int32", data=B.data)
        T.attr(0, "pragma_import_llvm", _LLVM)
        chunks = T.meta_var((m + ROW_CHUNK - 1) // ROW_CHUNK)
        for task in T.parallel(column_blocks * chunks):
            cb = T.meta_var(task // chunks)  # column blocks outermost: one block's B stays in cache
            first = T.meta_var(task % chunks * ROW_CHUNK)
            rows = T.meta_var(T.min(m - first, T.int64(ROW_CHUNK)))
            b_base = T.meta_var(cb * 2 * pairs * 16)
            column = T.meta_var(cb * COLUMN_BLOCK)
            for t in range(rows // ROWS):
                full(A1, B1, Bias, R, C, (first + t * ROWS) * pairs, b_base, first + t * ROWS, column)
            rest = T.meta_var(rows % ROWS)  # under 14: a block of 8, 4, 2 and 1 row per bit
            at8 = T.meta_var(first + rows // ROWS * ROWS)
            at4 = T.meta_var(at8 + rest // 8 * 8)
            at2 = T.meta_var(at4 + rest % 8 // 4 * 4)
            at1 = T.meta_var(at2 + rest % 4 // 2 * 2)
            if rest >= 8:
                eight(A1, B1, Bias, R, C, at8 * pairs, b_base, at8, column)
            if rest % 8 >= 4:
                four(A1, B1, Bias, R, C, at4 * pairs, b_base, at4, column)
            if rest % 4 >= 2:
                two(A1, B1, Bias, R, C, at2 * pairs, b_base, at2, column)
            if rest % 2 == 1:
                one(A1, B1, Bias, R, C, at1 * pairs, b_base, at1, column)

    return without_unread_params(avx512_matmul_bf16, post)


def conv2d_bf16(height: int, width: int, c: int, o: int, window, strides, dilation, post: PostOps | None = None):
    """The PrimFunc (X [n, height, width, c] bf16, already padded; W packed as
    vnni_layout.conv_packed_shape; [bias [o] f32, [residual [n, out_h, out_w, o] f32,]]
    Y [n, out_h, out_w, o] f32 or `post`'s out_dtype), n symbolic; `c` even; `post` as for
    `matmul_bf16`. The reduction runs over the window and the channels' pairs."""
    from tvm.script import tirx as T

    assert c % K_STEP == 0, c
    out_dtype = output_dtype(post)
    (kh, kw), (sh, sw), (dh, dw) = window, strides, dilation
    out_h, out_w = (height - (kh - 1) * dh - 1) // sh + 1, (width - (kw - 1) * dw - 1) // sw + 1
    pairs, column_blocks = c // 2, padded_columns(o) // COLUMN_BLOCK
    reduction = kh * kw * pairs
    full_blocks, rest = divmod(out_w, ROWS)
    residual = post is not None and post.residual

    def pick(residual_data, output_data):  # in Python, at parse time: the script's `if` wants a TIR bool
        return residual_data if residual else output_data

    def a_offset(base, p):  # p runs over the window's rows, its columns, then the channel pairs
        ky, kx, pair = p // (kw * pairs), p // pairs % kw, p % pairs
        return base + (ky * dh * width + kx * dw) * pairs + pair

    full = _block(ROWS, reduction, a_offset, sw * pairs, o, post)
    last = _block(max(rest, 1), reduction, a_offset, sw * pairs, o, post)

    @T.prim_func(check_well_formed=False)
    def avx512_conv2d_bf16(x: T.handle, w: T.handle, bias: T.handle, residual: T.handle, y: T.handle):
        T.func_attr({"tir.noalias": True})
        n = T.int64()
        X = T.match_buffer(x, (n, height, width, c), "bfloat16")
        W = T.match_buffer(w, conv_packed_shape(kh, kw, c, o), "bfloat16")
        Bias = T.match_buffer(bias, (o,), "float32")
        R = T.match_buffer(residual, (n, out_h, out_w, o), "float32")
        Y = T.match_buffer(y, (n, out_h, out_w, o), out_dtype)
        X1 = T.decl_buffer((n * height * width * pairs,), "int32", data=X.data)
        W1 = T.decl_buffer((column_blocks * 2 * reduction * 16,), "int32", data=W.data)
        # a row per output pixel (a variant without the residual leaves R out, and reads no R2)
        R2 = T.decl_buffer((n * out_h * out_w, o), "float32", data=pick(R.data, Y.data))
        Y2 = T.decl_buffer((n * out_h * out_w, o), out_dtype, data=Y.data)
        T.attr(0, "pragma_import_llvm", _LLVM)
        for task in T.parallel(column_blocks * n * out_h):
            cb = T.meta_var(task // (n * out_h))  # column blocks outermost: one block's W stays in cache
            image_row = T.meta_var(task % (n * out_h))  # image * out_h + output row
            image, oy = T.meta_var(image_row // out_h), T.meta_var(image_row % out_h)
            a_row = T.meta_var((image * height + oy * sh) * width)  # the window's top left pixel, pixel 0
            b_base = T.meta_var(cb * 2 * reduction * 16)
            for t in range(full_blocks):
                full(X1, W1, Bias, R2, Y2, (a_row + t * ROWS * sw) * pairs, b_base, image_row * out_w + t * ROWS,
                     cb * COLUMN_BLOCK)
            if rest > 0:
                last(X1, W1, Bias, R2, Y2, (a_row + full_blocks * ROWS * sw) * pairs, b_base,
                     image_row * out_w + full_blocks * ROWS, cb * COLUMN_BLOCK)

    return without_unread_params(avx512_conv2d_bf16, post)
