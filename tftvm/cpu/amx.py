"""A bf16 matmul on AMX tiles: C[m, n] (f32) = A[m, k] (bf16) · B (bf16, packed), f32 accumulation.

AMX multiplies a 16 x 32 bf16 tile of A by a 32 x 16 tile of B into a 16 x 16 f32 tile of C
in one instruction (TDPBF16PS), which reads B in the "VNNI" order: row r of the B tile holds
the pairs B[2r, j], B[2r + 1, j] for j in 0..15. So B is packed once, as
[n / 16, k / 2, 16, 2] (vnni_layout.py), and each 32 x 16 B tile is 1 KB of contiguous
memory; A and C are read and written in place, row-major, with their row strides.

Each parallel task holds a 32 x 32 block of C in four tile registers (two A tiles times two
B tiles: four loads feed four multiplies) for the whole k loop and stores it once. Tasks walk
the row blocks of one column block after another, so a column block of B (k x 32) stays in
cache while every row block uses it. A last row block of fewer than 32 rows configures its
tiles with the rows it has (the tile configuration is data, set per task), so m may be any
size, a symbolic batch included; k is a multiple of 32 (the caller pads A and B), and B is
packed with zero columns up to a multiple of 32, of which the kernel writes the output's n.
The tile configuration and registers are per thread: each task loads the configuration and
releases the tiles when done.
"""
from __future__ import annotations

from .post_ops import PostOps, output_dtype, without_unread_params, written
from .vnni_layout import COLUMN_BLOCK, conv_packed_shape, packed_shape, padded_columns

K_STEP = 32  # bf16 values of k per tile (64 bytes a row)
ROW_BLOCK = 32  # two 16-row tiles of A and C
ROW_CHUNK = 8  # row blocks a parallel task runs one after another, under one tile configuration


def _tiles():
    """TVMScript macros shared by the kernels: the tile configuration, and the 2 x 2 and 1 x 2
    tile products over a k loop (A tiles 4, 5; B tiles 6, 7; C tiles 0, 1 and 2, 3)."""
    from tvm.script import tirx as T

    def intrin(name, *args):
        return T.call_llvm_intrin("void", f"llvm.x86.{name}", *args)

    @T.macro
    def configure(config, upper, lower):
        # palette 1; every tile's rows are 64 bytes; A and C tiles have the rows the block has
        for i in range(64):
            config[i] = T.uint8(0)
        config[0] = T.uint8(1)
        for tile in range(8):
            config[16 + 2 * tile] = T.uint8(64)
        for tile in range(2):
            config[48 + tile] = T.Cast("uint8", upper)
            config[50 + tile] = T.Cast("uint8", T.max(lower, T.int64(1)))
            config[54 + tile] = T.uint8(16)
        config[52] = T.Cast("uint8", upper)
        config[53] = T.Cast("uint8", T.max(lower, T.int64(1)))
        T.evaluate(intrin("ldtilecfg", T.address_of(config[0])))

    @T.macro
    def zero(tiles):
        for tile in T.unroll(tiles):
            T.evaluate(intrin("tilezero", T.int8(tile)))

    @T.macro
    def load(tile, pointer, stride):
        T.evaluate(intrin("tileloadd64", T.int8(tile), pointer, stride))

    @T.macro
    def multiply_2x2():
        T.evaluate(intrin("tdpbf16ps", T.int8(0), T.int8(4), T.int8(6)))
        T.evaluate(intrin("tdpbf16ps", T.int8(1), T.int8(4), T.int8(7)))
        T.evaluate(intrin("tdpbf16ps", T.int8(2), T.int8(5), T.int8(6)))
        T.evaluate(intrin("tdpbf16ps", T.int8(3), T.int8(5), T.int8(7)))

    @T.macro
    def multiply_1x2():
        T.evaluate(intrin("tdpbf16ps", T.int8(0), T.int8(4), T.int8(6)))
        T.evaluate(intrin("tdpbf16ps", T.int8(1), T.int8(4), T.int8(7)))

    @T.macro
    def store(tile, pointer, stride):
        T.evaluate(intrin("tilestored64", T.int8(tile), pointer, stride))

    @T.macro
    def release():
        T.evaluate(intrin("tilerelease"))

    return configure, zero, load, multiply_2x2, multiply_1x2, store, release


def matmul_bf16(k: int, n: int, post: PostOps | None = None):
    """The PrimFunc (A [m, k] bf16, B packed as vnni_layout.packed_shape(k, n) bf16, [bias [n]
    f32, [residual [m, n] f32,]] C [m, n] f32 or `post`'s out_dtype), m symbolic; `k` a
    multiple of K_STEP; `post`: the post-ops on the results (then bias, and residual where it
    says). Written without blocks: the default schedule leaves it as it is."""
    from tvm.script import tirx as T

    assert k % K_STEP == 0, k
    out_dtype = output_dtype(post)
    configure, zero, load, multiply_2x2, multiply_1x2, store, release = _tiles()
    k_steps, column_blocks, tail = k // K_STEP, padded_columns(n) // COLUMN_BLOCK, n % COLUMN_BLOCK
    a_stride, c_stride, b_stride = T.int64(2 * k), T.int64(4 * n), T.int64(64)  # bytes a row
    fused = post is not None or tail != 0  # the tiles go through `acc`, and the kernel writes C
    block_stride = T.int64(4 * COLUMN_BLOCK)  # a row of the block's accumulators

    @T.macro
    def write(C, Bias, R, acc, row, i, col, width):  # the first `width` columns of the block's row i
        for j in T.vectorized(width):
            C[row + i, col + j] = written(post, acc[i, j], Bias, R, (row + i, col + j))

    @T.prim_func(check_well_formed=False)
    def amx_matmul_bf16(a: T.handle, b: T.handle, bias: T.handle, residual: T.handle, c: T.handle):
        T.func_attr({"tir.noalias": True})
        m = T.int64()
        A = T.match_buffer(a, (m, k), "bfloat16")
        B = T.match_buffer(b, packed_shape(k, n), "bfloat16")
        Bias = T.match_buffer(bias, (n,), "float32")
        R = T.match_buffer(residual, (m, n), "float32")
        C = T.match_buffer(c, (m, n), out_dtype)
        row_blocks = (m + ROW_BLOCK - 1) // ROW_BLOCK
        row_chunks = (row_blocks + ROW_CHUNK - 1) // ROW_CHUNK
        for task in T.parallel(row_chunks * column_blocks):
            config = T.decl_buffer((64,), "uint8")  # global scope: on the stack (cpu/avx512_bf16.py)
            acc = T.decl_buffer((ROW_BLOCK, COLUMN_BLOCK), "float32", scope="local")
            cb = T.meta_var(task // row_chunks)
            col = T.meta_var(cb * COLUMN_BLOCK)
            first = T.meta_var(task % row_chunks * ROW_CHUNK)
            for block in range(T.min(row_blocks - first, T.int64(ROW_CHUNK))):
                row = T.meta_var((first + block) * ROW_BLOCK)
                upper = T.meta_var(T.min(m - row, T.int64(16)))  # rows of the upper A and C tiles
                lower = T.meta_var(T.min(m - row - upper, T.int64(16)))  # of the lower ones: 0 where there are none
                if block == 0 or lower < 16:  # a task's first block, and a last one of fewer rows
                    configure(config, upper, lower)
                if lower > 0:
                    zero(4)
                    for step in range(k_steps):
                        load(4, T.address_of(A[row, step * K_STEP]), a_stride)
                        load(5, T.address_of(A[row + 16, step * K_STEP]), a_stride)
                        load(6, T.address_of(B[cb * 2, step * 16, 0, 0]), b_stride)
                        load(7, T.address_of(B[cb * 2 + 1, step * 16, 0, 0]), b_stride)
                        multiply_2x2()
                    if fused:
                        store(2, T.address_of(acc[16, 0]), block_stride)
                        store(3, T.address_of(acc[16, 16]), block_stride)
                    else:
                        store(2, T.address_of(C[row + 16, col]), c_stride)
                        store(3, T.address_of(C[row + 16, col + 16]), c_stride)
                else:  # the last row block, 16 rows or fewer
                    zero(2)
                    for step in range(k_steps):
                        load(4, T.address_of(A[row, step * K_STEP]), a_stride)
                        load(6, T.address_of(B[cb * 2, step * 16, 0, 0]), b_stride)
                        load(7, T.address_of(B[cb * 2 + 1, step * 16, 0, 0]), b_stride)
                        multiply_1x2()
                if fused:
                    store(0, T.address_of(acc[0, 0]), block_stride)
                    store(1, T.address_of(acc[0, 16]), block_stride)
                    for i in range(upper + lower):
                        if tail == 0:
                            write(C, Bias, R, acc, row, i, col, COLUMN_BLOCK)
                        elif col + COLUMN_BLOCK <= n:
                            write(C, Bias, R, acc, row, i, col, COLUMN_BLOCK)
                        else:  # the last column block of a count that is no multiple of 32
                            write(C, Bias, R, acc, row, i, col, tail)
                else:
                    store(0, T.address_of(C[row, col]), c_stride)
                    store(1, T.address_of(C[row, col + 16]), c_stride)
            release()

    return without_unread_params(amx_matmul_bf16, post)


def conv2d_bf16(height: int, width: int, c: int, o: int, window, strides, dilation, post: PostOps | None = None):
    """The PrimFunc (X [n, height, width, c] bf16, already padded; W packed as
    vnni_layout.conv_packed_shape; [bias [o] f32, [residual [n, out_h, out_w, o] f32,]] Y [n, out_h,
    out_w, o] f32 or `post`'s out_dtype), n symbolic; `c` a multiple of K_STEP; `post` as for
    `matmul_bf16`. A's tile rows are 16 neighbouring output pixels of one output row, whose
    inputs lie a constant stride apart for every window position; its two A tiles are two
    output rows, so that a 7-pixel row still makes a 2 x 2 tile block. The reduction runs over
    the window and the channels in steps of 32."""
    from tvm.script import tirx as T

    assert c % K_STEP == 0, c
    out_dtype = output_dtype(post)
    configure, zero, load, multiply_2x2, multiply_1x2, store, release = _tiles()
    (kh, kw), (sh, sw), (dh, dw) = window, strides, dilation
    out_h, out_w = (height - (kh - 1) * dh - 1) // sh + 1, (width - (kw - 1) * dw - 1) // sw + 1
    row_pairs, column_blocks, channel_blocks = -(-out_h // 2), -(-out_w // 16), padded_columns(o) // COLUMN_BLOCK
    per_image = row_pairs * column_blocks
    a_stride, c_stride, b_stride = T.int64(2 * c * sw), T.int64(4 * o), T.int64(64)  # bytes a tile row
    c_steps, tail = c // K_STEP, o % COLUMN_BLOCK
    fused = post is not None or tail != 0  # the tiles go through `acc`, and the kernel writes Y
    block_stride = T.int64(4 * COLUMN_BLOCK)  # a row of the block's accumulators

    @T.macro
    def write(Y, Bias, R, acc, image, top, left, out, half, i, width):  # the first `width` columns of a row
        for j in T.vectorized(width):
            Y[image, top + half, left + i, out + j] = written(post, acc[half * 16 + i, j], Bias, R,
                                                              (image, top + half, left + i, out + j))

    @T.prim_func(check_well_formed=False)
    def amx_conv2d_bf16(x: T.handle, w: T.handle, bias: T.handle, residual: T.handle, y: T.handle):
        T.func_attr({"tir.noalias": True})
        n = T.int64()
        X = T.match_buffer(x, (n, height, width, c), "bfloat16")
        W = T.match_buffer(w, conv_packed_shape(kh, kw, c, o), "bfloat16")
        Bias = T.match_buffer(bias, (o,), "float32")
        R = T.match_buffer(residual, (n, out_h, out_w, o), "float32")
        Y = T.match_buffer(y, (n, out_h, out_w, o), out_dtype)
        spatial_chunks = (per_image + ROW_CHUNK - 1) // ROW_CHUNK
        for task in T.parallel(channel_blocks * n * spatial_chunks):
            config = T.decl_buffer((64,), "uint8")  # global scope: on the stack (cpu/avx512_bf16.py)
            acc = T.decl_buffer((ROW_BLOCK, COLUMN_BLOCK), "float32", scope="local")
            cb = T.meta_var(task // (n * spatial_chunks))  # channel blocks outermost: each block's weights stay in cache
            image = T.meta_var(task % (n * spatial_chunks) // spatial_chunks)
            first = T.meta_var(task % spatial_chunks * ROW_CHUNK)
            out = T.meta_var(cb * COLUMN_BLOCK)
            for block in range(T.min(per_image - first, ROW_CHUNK)):
                top = T.meta_var((first + block) // column_blocks * 2)
                left = T.meta_var((first + block) % column_blocks * 16)
                pixels = T.meta_var(T.min(T.int64(out_w) - left, T.int64(16)))
                lower = T.meta_var(T.if_then_else(top + 1 < out_h, pixels, T.int64(0)))
                # A task's first block, and every block whose rows differ from the tiles' (a partial
                # column block, the last row of an odd count, and the full block after either).
                if block == 0 or config[48] != T.Cast("uint8", pixels) or config[50] != T.Cast("uint8", T.max(lower, 1)):
                    configure(config, pixels, lower)
                if lower > 0:
                    zero(4)
                    for ky, kx, step in T.grid(kh, kw, c_steps):
                        load(4, T.address_of(X[image, top * sh + ky * dh, left * sw + kx * dw, step * K_STEP]),
                             a_stride)
                        load(5, T.address_of(X[image, (top + 1) * sh + ky * dh, left * sw + kx * dw, step * K_STEP]),
                             a_stride)
                        load(6, T.address_of(W[cb * 2, ky, kx, step * 16, 0, 0]), b_stride)
                        load(7, T.address_of(W[cb * 2 + 1, ky, kx, step * 16, 0, 0]), b_stride)
                        multiply_2x2()
                    if fused:
                        store(2, T.address_of(acc[16, 0]), block_stride)
                        store(3, T.address_of(acc[16, 16]), block_stride)
                    else:
                        store(2, T.address_of(Y[image, top + 1, left, out]), c_stride)
                        store(3, T.address_of(Y[image, top + 1, left, out + 16]), c_stride)
                else:  # the last output row of an odd count
                    zero(2)
                    for ky, kx, step in T.grid(kh, kw, c_steps):
                        load(4, T.address_of(X[image, top * sh + ky * dh, left * sw + kx * dw, step * K_STEP]),
                             a_stride)
                        load(6, T.address_of(W[cb * 2, ky, kx, step * 16, 0, 0]), b_stride)
                        load(7, T.address_of(W[cb * 2 + 1, ky, kx, step * 16, 0, 0]), b_stride)
                        multiply_1x2()
                if fused:
                    store(0, T.address_of(acc[0, 0]), block_stride)
                    store(1, T.address_of(acc[0, 16]), block_stride)
                    for half in range(T.if_then_else(lower > 0, 2, 1)):
                        for i in range(pixels):
                            if tail == 0:
                                write(Y, Bias, R, acc, image, top, left, out, half, i, COLUMN_BLOCK)
                            elif out + COLUMN_BLOCK <= o:
                                write(Y, Bias, R, acc, image, top, left, out, half, i, COLUMN_BLOCK)
                            else:  # the last column block of a count that is no multiple of 32
                                write(Y, Bias, R, acc, image, top, left, out, half, i, tail)
                else:
                    store(0, T.address_of(Y[image, top, left, out]), c_stride)
                    store(1, T.address_of(Y[image, top, left, out + 16]), c_stride)
            release()

    return without_unread_params(amx_conv2d_bf16, post)
