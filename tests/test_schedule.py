"""The default CPU schedule: tiled reductions compute what NumPy computes, for any shape."""
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf
import tftvm
import tvm
from tftvm.schedule import default_cpu_schedule, default_cpu_trace, vector_lanes
from tvm import te


def matmul(m, k, n):
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    return A, B, te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")


def scheduled_script(A, B, C) -> str:
    return default_cpu_schedule(tvm.IRModule({"mm": te.create_prim_func([A, B, C])})).script()


@pytest.mark.parametrize("m, k, n, tiled", [
    (64, 48, 64, True),    # rows and columns both tile
    (13, 7, 48, True),     # no tile height divides 13 rows: the last tile is cut short
    (14, 7, 48, True),     # 7-row tiles
    ("m", 33, 16, True),   # symbolic rows padded to whole tiles, one vector of columns
    (16, 12, 40, True),    # 40 columns, no multiple of a vector: half-vector tiles (Xception's 728)
    (19, 96, 40, True),    # ... one tile of 19 rows (half-vector tiles take up to 28)
    ("m", 80, 40, True),   # ... symbolic rows padded to 8-row tiles
    (16, 64, 30, True),    # 30 columns (keys): padded to 32, tiles of two vectors
    ("m", 24, 10, True),   # 10 classes of a None batch: rows and columns padded (12: 4-wide tiles)
    (9, 20, 17, True),     # 17 columns padded to 20
    (5, 6, 7, True),       # 7 columns padded to 8
    (5, 6, 5, True),       # 5 columns: padding to 8 adds more than a quarter; one 5-wide tile
    (5, 6, 3, False),      # 3 columns: parallel loop only
])  # fmt: skip
def test_matmul_matches_numpy(m, k, n, tiled, rng):
    A, B, C = matmul(te.var("m") if m == "m" else m, k, n)
    assert ("_local" in scheduled_script(A, B, C)) == tiled
    op = tftvm.op([A, B], [C], name=f"sched_mm_{m}_{k}_{n}")
    for rows in ([1, 9, 16, 24] if m == "m" else [m]):
        a = rng.standard_normal((rows, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        np.testing.assert_allclose(op(a, b).numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_half_vector_tiles_take_the_rows_of_an_image_row_in_one_tile():
    """19 rows, 40 columns (8 per tile): one tile of 19 rows, no bounds-checked tile (T.where)."""
    script = scheduled_script(*matmul(19, 96, 40))
    assert "T.unroll(19)" in script and "T.where" not in script


def test_tiled_conv_and_pool_match_tf(rng):
    x = te.placeholder((1, 6, 6, 32), name="x")
    w = te.placeholder((3, 3, 32, 32), name="w")
    rh, rw, rc = (te.reduce_axis((0, e), name=nm) for e, nm in ((3, "rh"), (3, "rw"), (32, "rc")))
    conv = te.compute((1, 4, 4, 32), lambda b, h, v, c: te.sum(x[b, h + rh, v + rw, rc] * w[rh, rw, rc, c],
                                                            axis=[rh, rw, rc]), name="conv")  # fmt: skip
    ph, pw = te.reduce_axis((0, 2), name="ph"), te.reduce_axis((0, 2), name="pw")
    pool = te.compute((1, 2, 2, 32), lambda b, h, v, c: te.max(conv[b, 2 * h + ph, 2 * v + pw, c],
                                                            axis=[ph, pw]), name="pool")  # fmt: skip
    op = tftvm.op([x, w], [pool], name="sched_conv_pool")
    xv = rng.standard_normal((1, 6, 6, 32)).astype(np.float32)
    wv = rng.standard_normal((3, 3, 32, 32)).astype(np.float32)
    want = tf.nn.max_pool2d(tf.nn.conv2d(xv, wv, 1, "VALID"), 2, 2, "VALID")
    np.testing.assert_allclose(op(xv, wv).numpy(), want.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("side, kernel", [(7, 1), (14, 3), (28, 3), (19, 1), (17, 3)])
def test_conv_tiles_of_any_image_side_match_tf(side, kernel, rng):
    """7x7 and 14x14 images tile 7 rows, 28x28 7 (not 8 straddling two image rows),
    19x19 and 17x17 cut their last tile short; a None batch runs at two sizes."""
    w = tf.constant(rng.standard_normal((kernel, kernel, 24, 32)).astype(np.float32))
    optimized = tftvm.optimize(lambda x: tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME")),
                               [tf.TensorSpec([None, side, side, 24])], min_cluster_size=1)  # fmt: skip
    for batch in (1, 3):
        x = rng.standard_normal((batch, side, side, 24)).astype(np.float32)
        want = tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME")).numpy()
        np.testing.assert_allclose(optimized(x).numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("units", [64, 10])
def test_dense_with_epilogue_over_padded_rows_matches_tf(units, rng):
    """A None batch is padded to 8-row tiles (and 10 units to 12 columns); the bias and ReLU
    ride on the copy out, which must write exactly the batch's rows (17: two whole tiles and
    one row) and the layer's units."""
    w = tf.constant(rng.standard_normal((40, units)).astype(np.float32))
    b = tf.constant(rng.standard_normal(units).astype(np.float32))
    optimized = tftvm.optimize(lambda x: tf.nn.relu(x @ w + b), [tf.TensorSpec([None, 40])], min_cluster_size=1)
    for batch in (1, 8, 17):
        x = rng.standard_normal((batch, 40)).astype(np.float32)
        np.testing.assert_allclose(optimized(x).numpy(), tf.nn.relu(x @ w + b).numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m, k, n, parallel", [
    (8, 16, 32, False),      # 4K iterations: the pool's wake-up would cost more than the work
    ("m", 32, 256, False),   # an RNN step's x.W, batch counted as TYPICAL_DIM
    (256, 256, 64, True),    # 4M iterations
    ("m", 512, 512, True),
    (1, 1280, 1000, True),   # a classifier at batch 1: 1.3M iterations, but 5 MB of weights to stream
])  # fmt: skip
def test_only_blocks_worth_it_run_in_parallel(m, k, n, parallel, rng):
    A, B, C = matmul(te.var("m") if m == "m" else m, k, n)
    assert ("T.parallel" in scheduled_script(A, B, C)) == parallel
    op = tftvm.op([A, B], [C], name=f"sched_par_{m}_{k}_{n}")
    rows = 5 if m == "m" else m
    a, b = rng.standard_normal((rows, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    np.testing.assert_allclose(op(a, b).numpy(), a @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("side, parallel", [(112, True), (40, False)])
def test_an_elementwise_pass_runs_in_parallel_from_a_megabyte_moved(side, parallel, rng):
    """A squeeze-excite scale, x [1, side, side, 32] * s [1, 1, 1, 32]: at 112 it reads 1.6 MB
    and writes 1.6 MB (under the 2 MB read and 2M iterations a reduction needs), at 40 it
    moves 0.4 MB, less than waking the pool costs."""
    x, s = te.placeholder((1, side, side, 32), name="x"), te.placeholder((1, 1, 1, 32), name="s")
    y = te.compute(x.shape, lambda b, h, w, c: x[b, h, w, c] * s[0, 0, 0, c], name="y")
    script = default_cpu_schedule(tvm.IRModule({"scale": te.create_prim_func([x, s, y])})).script()
    assert ("T.parallel" in script) == parallel, script
    op = tftvm.op([x, s], [y], name=f"sched_scale_{side}")
    xv = rng.standard_normal((1, side, side, 32)).astype(np.float32)
    sv = rng.standard_normal((1, 1, 1, 32)).astype(np.float32)
    np.testing.assert_array_equal(op(xv, sv).numpy(), xv * sv)


def test_a_none_batch_padding_stage_is_vectorized_over_its_static_image(rng):
    """A conv's padding stage with a None batch: the static image loops are vectorized
    (left to LLVM it stayed scalar: MobileNetV2's depthwise kernels 4-8x slower)."""
    n = te.var("n")
    x = te.placeholder((n, 6, 6, 16), name="x")
    pad = te.compute((n, 8, 8, 16), lambda b, h, w, c: te.if_then_else(
        te.all(h >= 1, h < 7, w >= 1, w < 7), x[b, h - 1, w - 1, c], 0.0), name="pad")  # fmt: skip
    script = default_cpu_schedule(tvm.IRModule({"pad": te.create_prim_func([x, pad])})).script()
    assert "T.vectorized" in script
    op = tftvm.op([x], [pad], name="sched_pad_none_batch")
    for batch in (1, 3):
        xv = rng.standard_normal((batch, 6, 6, 16)).astype(np.float32)
        np.testing.assert_array_equal(op(xv).numpy(), np.pad(xv, [(0, 0), (1, 1), (1, 1), (0, 0)]))


def test_a_three_channel_padding_stage_runs_in_parallel_by_image_row(rng):
    """3 channels make no whole vectors: parallel over batch and rows, each row a serial loop
    (parallel element by element, each element paid the loop's index arithmetic: an image
    model's first conv 2x slower)."""
    n = te.var("n")
    x = te.placeholder((n, 224, 224, 3), name="x")
    pad = te.compute((n, 225, 225, 3), lambda b, h, w, c: te.if_then_else(
        te.all(h < 224, w < 224), x[b, h, w, c], 0.0), name="pad")  # fmt: skip
    script = default_cpu_schedule(tvm.IRModule({"pad": te.create_prim_func([x, pad])})).script()
    assert "T.parallel(n * 225)" in script
    op = tftvm.op([x], [pad], name="sched_pad_rgb")
    for batch in (1, 2):
        xv = rng.standard_normal((batch, 224, 224, 3)).astype(np.float32)
        np.testing.assert_array_equal(op(xv).numpy(), np.pad(xv, [(0, 0), (0, 1), (0, 1), (0, 0)]))


def test_a_static_padding_stage_whose_rows_make_no_whole_chunks_runs_by_image_row(rng):
    """An image cast and padded for a bf16 stem conv (8 x 225 x 225 x 4): only the whole
    tensor is a whole number of 32-lane chunks, and chunks over it straddle rows, so each
    lane's index was divided apart (batch 8: 2.0 ms, by rows 0.13). Rows in parallel, each a
    serial loop, as at batch 1."""
    x = te.placeholder((8, 224, 224, 3), name="x")
    pad = te.compute((8, 225, 225, 4), lambda b, h, w, c: te.if_then_else(
        te.all(h < 224, w < 224, c < 3), x[b, h, w, c].astype("bfloat16"), tvm.tirx.const(0, "bfloat16")),
        name="pad")  # fmt: skip
    script = default_cpu_schedule(tvm.IRModule({"pad": te.create_prim_func([x, pad])})).script()
    assert "T.parallel(1800)" in script and "T.vectorized" not in script, script
    op = tftvm.op([x], [pad], name="sched_pad_rgb_static_bf16")
    xv = rng.standard_normal((8, 224, 224, 3)).astype(np.float32)
    want = np.pad(xv, [(0, 0), (0, 1), (0, 1), (0, 1)]).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(np.asarray(op(xv).numpy(), np.float32), want.astype(np.float32))


def test_a_per_channel_scale_of_rgb_pixels_runs_in_chunks_of_whole_pixels(rng):
    """Keras' Normalization on 3-channel pixels: chunks of 3 vectors (16 pixels), so that each
    lane reads one channel's scale in every chunk (in chunks of one vector each lane computed
    its channel, and the scales were gathered: 20x slower)."""
    lanes = vector_lanes("float32")
    x = te.placeholder((1, 224, 224, 3), name="x")
    mean, scale = te.placeholder((3,), name="mean"), te.placeholder((3,), name="scale")
    y = te.compute((1, 224, 224, 3), lambda b, h, w, c: (x[b, h, w, c] - mean[c]) * scale[c], name="y")
    script = default_cpu_schedule(tvm.IRModule({"norm": te.create_prim_func([x, mean, scale, y])})).script()
    if lanes in (8, 16):
        assert "T.unroll(3)" in script and f"T.vectorized({lanes})" in script
    op = tftvm.op([x, mean, scale], [y], name="sched_rgb_norm")
    xv = rng.standard_normal((1, 224, 224, 3)).astype(np.float32)
    mv, sv = np.float32([0.485, 0.456, 0.406]), np.float32([4.4, 4.5, 4.4])
    np.testing.assert_allclose(op(xv, mv, sv).numpy(), (xv - mv) * sv, rtol=1e-6, atol=1e-6)


def test_a_global_mean_over_a_none_batch_does_not_pad_the_batch(rng):
    """No input is shared by the rows (images) of a global average pool, so its symbolic
    batch is not padded to a tile's 8 rows (which copied and summed 8 images for 1)."""
    n = te.var("n")
    x = te.placeholder((n, 14, 14, 64), name="x")
    kh, kw = te.reduce_axis((0, 14), name="kh"), te.reduce_axis((0, 14), name="kw")
    total = te.compute((n, 64), lambda b, c: te.sum(x[b, kh, kw, c], axis=[kh, kw]), name="total")
    script = default_cpu_schedule(tvm.IRModule({"mean": te.create_prim_func([x, total])})).script()
    assert "_pad" not in script and "_local" in script
    op = tftvm.op([x], [total], name="sched_global_sum")
    for batch in (1, 3, 9):
        xv = rng.standard_normal((batch, 14, 14, 64)).astype(np.float32)
        np.testing.assert_allclose(op(xv).numpy(), xv.sum(axis=(1, 2)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("side", [19, 38])
def test_depthwise_conv_of_half_vector_channels_matches_tf(side, rng):
    """24 channels (no multiple of a vector) and 19-pixel image rows: one tile of 19 rows,
    not 8 + 8 + 3 with a bounds check; the padding stage vectorized 8 wide within a pixel."""
    w = tf.constant(rng.standard_normal((3, 3, 24, 1)).astype(np.float32))

    def model(x):
        return tf.nn.relu(tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME"))

    optimized = tftvm.optimize(model, [tf.TensorSpec([None, side, side, 24])], min_cluster_size=1)
    assert optimized.summary().fraction == 1.0
    for batch in (1, 2):
        x = rng.standard_normal((batch, side, side, 24)).astype(np.float32)
        np.testing.assert_allclose(optimized(x).numpy(), model(x).numpy(), rtol=1e-4, atol=1e-4)


def test_a_padding_stage_of_24_channels_is_vectorized_within_each_pixel():
    x = te.placeholder((1, 19, 19, 24), name="x")
    pad = te.compute((1, 21, 21, 24), lambda b, h, w, c: te.if_then_else(
        te.all(h >= 1, h < 20, w >= 1, w < 20), x[b, h - 1, w - 1, c], 0.0), name="pad")  # fmt: skip
    script = default_cpu_schedule(tvm.IRModule({"pad": te.create_prim_func([x, pad])})).script()
    # 16 lanes would straddle two pixels (24 % 16 != 0), and the pad's condition differs per lane.
    assert "T.vectorized(8)" in script and "T.vectorized(16)" not in script


def test_an_elementwise_chain_runs_as_one_loop_but_stays_out_of_a_reduction(rng):
    """GELU's multiply, erf, add, multiply become one block (one pass over memory); the
    elementwise op that feeds a matmul is not inlined into it (computed again per reuse)."""
    x = te.placeholder((8, 64), name="x")
    w = te.placeholder((64, 32), name="w")
    scaled = te.compute(x.shape, lambda i, j: x[i, j] * 0.5, name="scaled")
    gelu = te.compute(x.shape, lambda i, j: scaled[i, j] * (te.erf(scaled[i, j]) + 1.0), name="gelu")
    r = te.reduce_axis((0, 64), name="r")
    out = te.compute((8, 32), lambda i, j: te.sum(gelu[i, r] * w[r, j], axis=r), name="out")
    script = default_cpu_schedule(tvm.IRModule({"f": te.create_prim_func([x, w, out])})).script()
    assert 'T.sblock("scaled")' not in script and 'T.sblock("gelu")' in script
    op = tftvm.op([x, w], [out], name="sched_gelu_mm")
    xv = rng.standard_normal((8, 64)).astype(np.float32)
    wv = rng.standard_normal((64, 32)).astype(np.float32)
    half = xv * 0.5
    want = (half * (tf.math.erf(half).numpy() + 1.0)) @ wv
    np.testing.assert_allclose(op(xv, wv).numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("b, m, n, k, block", [(3, 17, 17, 64, [17]), (2, 30, 30, 128, [5, 5]),
                                               (2, 5, 40, 32, [5, 5])])
def test_dot_products_along_contiguous_rows_are_vectorized_along_the_rows(b, m, n, k, block, rng):
    """Q·Kᵀ reads both operands along their last axis: tiled along the keys (the output's last
    axis), every vector would be gathered at a row's stride; each output instead accumulates a
    vector of partial sums along its row (rfactor), for 17 or 30 keys too (no tile fits). A task
    computes a block of queries x keys (`block`, unrolled) so each vector loaded serves several."""
    a = te.placeholder((b, m, k), name="a")
    bt = te.placeholder((b, n, k), name="bt")
    r = te.reduce_axis((0, k), name="r")
    out = te.compute((b, m, n), lambda i, x, y: te.sum(a[i, x, r] * bt[i, y, r], axis=r), name="out")
    script = default_cpu_schedule(tvm.IRModule({"f": te.create_prim_func([a, bt, out])})).script()
    assert 'T.sblock("out_rf_update")' in script and "T.vectorized" in script
    sch = default_cpu_trace(tvm.IRModule({"f": te.create_prim_func([a, bt, out])}))
    loops = [sch.get(loop) for loop in sch.get_loops(sch.get_sblock("out_rf_update"))]
    assert [int(loop.extent) for loop in loops if loop.kind == tvm.tirx.ForKind.UNROLLED] == block
    op = tftvm.op([a, bt], [out], name=f"sched_qk_{b}x{m}x{n}x{k}")
    av = rng.standard_normal((b, m, k)).astype(np.float32)
    bv = rng.standard_normal((b, n, k)).astype(np.float32)
    want = tf.linalg.matmul(av, bv, transpose_b=True).numpy()
    np.testing.assert_allclose(op(av, bv).numpy(), want, rtol=1e-4, atol=1e-4)


def attention_einsum(equation, shapes, names):
    """Keras' attention einsum as Relax legalizes it (topi.einsum), over a `None` batch."""
    from tvm import topi

    batch = te.var("batch")
    operands = [te.placeholder((batch, *shape), name=name) for shape, name in zip(shapes, names)]
    return operands, topi.einsum(equation, *operands)


def matches_einsum_at_batches(op, equation, shapes, rng, scale=1.0):
    for n in (1, 2):
        args = [rng.standard_normal((n, *shape)).astype(np.float32) for shape in shapes]
        np.testing.assert_allclose(op(*args).numpy(), np.einsum(equation, *args) * scale, rtol=1e-4, atol=1e-4)


def test_attention_scores_over_batch_and_heads_copy_the_keys_with_their_axis_last(rng):
    """Keras' attention scores, einsum("aecd,abcd->acbe", key, query) times a scale, at 128
    queries and keys: each key is read by every query, so the keys are copied once with their
    axis last ([batch, heads, depth, keys]) and the scores run in register tiles along them,
    the scale applied as they are written; a `None` batch stays symbolic."""
    shapes = [(128, 4, 32), (128, 4, 32)]  # [keys or queries, heads, depth]
    (key, query), scores = attention_einsum("aecd,abcd->acbe", shapes, ["key", "query"])
    scaled = te.compute(scores.shape, lambda *i: scores[i] * 0.125, name="scaled")
    script = default_cpu_trace(tvm.IRModule({"f": te.create_prim_func([key, query, scaled])})).mod.script()
    assert "key_global" in script and "_rf" not in script and 'T.sblock("scaled")' not in script, script
    op = tftvm.op([key, query], [scaled], name="sched_attention_scores")
    matches_einsum_at_batches(op, "aecd,abcd->acbe", shapes, rng, scale=0.125)


def test_attention_probs_times_values_tile_over_the_queries_not_the_heads(rng):
    """probs·V, einsum("acbe,aecd->abcd"), writes [batch, queries, heads, depth]: V is
    indexed by the heads, so the register tiles take 8 queries as rows (12 heads gave tiles of
    6 rows, each loading its own vector of V)."""
    shapes = [(12, 64, 64), (64, 12, 32)]  # probs [heads, queries, keys], V [keys, heads, depth]
    (probs, value), out = attention_einsum("acbe,aecd->abcd", shapes, ["probs", "value"])
    sch = default_cpu_trace(tvm.IRModule({"f": te.create_prim_func([probs, value, out])}))
    loops = [sch.get(loop) for loop in sch.get_loops(sch.get_sblock("T_einsum_update"))]
    assert [int(loop.extent) for loop in loops if loop.kind == tvm.tirx.ForKind.UNROLLED] == [8]
    op = tftvm.op([probs, value], [out], name="sched_probs_values")
    matches_einsum_at_batches(op, "acbe,aecd->abcd", shapes, rng)


@pytest.mark.parametrize("stride", [1, 2])
def test_a_depthwise_conv_reads_its_padding_in_place(stride, rng):
    """A depthwise conv's "same" padding is no pass writing a padded copy: its taps test the
    bounds as they read (each input is read by 9 taps, far fewer than a conv's channels)."""
    from tvm import topi

    x = te.placeholder((1, 20, 20, 32), name="x")
    w = te.placeholder((3, 3, 1, 32), name="w")
    out = topi.nn.group_conv2d_nhwc(x, w, stride, 1, 1, 32)
    script = default_cpu_schedule(tvm.IRModule({"f": te.create_prim_func([x, w, out])})).script()
    assert 'T.sblock("pad_temp")' not in script and "T.vectorized" in script, script
    op = tftvm.op([x, w], [out], name=f"sched_depthwise_{stride}")
    xv = rng.standard_normal((1, 20, 20, 32)).astype(np.float32)
    wv = rng.standard_normal((3, 3, 1, 32)).astype(np.float32)
    want = tf.nn.depthwise_conv2d(xv, wv.transpose(0, 1, 3, 2), [1, stride, stride, 1], [[0, 0], [1, 1], [1, 1], [0, 0]])
    np.testing.assert_allclose(op(xv, wv).numpy(), want.numpy(), rtol=1e-4, atol=1e-4)


def test_row_max_and_mean_over_the_last_axis_match_tf(rng):
    """A softmax's row max and a layer norm's mean reduce along contiguous memory: vectorized
    partial results (max and sum reducers), the rows in parallel."""
    from tvm import topi

    x = te.placeholder((4, 96, 128), name="x")
    row_max = topi.max(x, axis=-1, keepdims=True)
    mean = topi.sum(x, axis=-1, keepdims=True)
    for name, out, reference in [("max", row_max, tf.reduce_max), ("sum", mean, tf.reduce_sum)]:
        script = default_cpu_schedule(tvm.IRModule({"f": te.create_prim_func([x, out])})).script()
        assert "_rf_update" in script, name
        op = tftvm.op([x], [out], name=f"sched_row_{name}")
        xv = rng.standard_normal((4, 96, 128)).astype(np.float32)
        np.testing.assert_allclose(op(xv).numpy(), reference(xv, axis=-1, keepdims=True).numpy(),
                                   rtol=1e-4, atol=1e-4)  # fmt: skip


def test_a_conv_of_11_channels_runs_in_one_tile_of_all_its_columns(rng):
    """11 columns would be padded to 12, but pad_einsum refuses a conv: its register tiles take
    all 11 columns (NASNetMobile's stem), in parallel, and write back exactly them."""
    x = te.placeholder((1, 66, 66, 16), name="x")
    w = te.placeholder((3, 3, 16, 11), name="w")
    rh, rw, rc = (te.reduce_axis((0, e), name=nm) for e, nm in ((3, "rh"), (3, "rw"), (16, "rc")))
    conv = te.compute((1, 64, 64, 11), lambda b, h, v, c: te.sum(x[b, h + rh, v + rw, rc] * w[rh, rw, rc, c],
                                                              axis=[rh, rw, rc]), name="conv")  # fmt: skip
    script = scheduled_script(x, w, conv)
    assert "T.parallel" in script and "_local" in script
    op = tftvm.op([x, w], [conv], name="sched_conv_11")
    xv = rng.standard_normal((1, 66, 66, 16)).astype(np.float32)
    wv = rng.standard_normal((3, 3, 16, 11)).astype(np.float32)
    np.testing.assert_allclose(op(xv, wv).numpy(), tf.nn.conv2d(xv, wv, 1, "VALID").numpy(), rtol=1e-4, atol=1e-4)


def test_a_conv_of_144_channels_tiles_three_vectors_as_three_unrolled_vectors(rng):
    """144 channels (MobileNetV2's expansions): tiles of 8 rows x 3 vectors, not of one
    vector (8 accumulators, short of the FMA units' latency); the 3 vectors unrolled, since
    LLVM scalarizes a vector of 48 floats."""
    lanes = vector_lanes("float32")
    x = te.placeholder((1, 16, 16, 24), name="x")
    w = te.placeholder((1, 1, 24, 144), name="w")
    rc = te.reduce_axis((0, 24), name="rc")
    conv = te.compute((1, 16, 16, 144), lambda b, h, v, c: te.sum(x[b, h, v, rc] * w[0, 0, rc, c], axis=rc),
                      name="conv")  # fmt: skip
    script = scheduled_script(x, w, conv)
    if lanes == 16:
        assert "T.unroll(3)" in script and "T.vectorized(16)" in script and "T.vectorized(48)" not in script
    op = tftvm.op([x, w], [conv], name="sched_conv_144")
    xv = rng.standard_normal((1, 16, 16, 24)).astype(np.float32)
    wv = rng.standard_normal((1, 1, 24, 144)).astype(np.float32)
    np.testing.assert_allclose(op(xv, wv).numpy(), tf.nn.conv2d(xv, wv, 1, "VALID").numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape, axes, vectorized", [
    ((8, 16, 96), (0, 1), True),   # a bias gradient: 96 columns, rows of 8 x 16
    ((33, 48), (0,), True),        # odd row count
    ((6, 30), (0,), False),        # 30 columns: no vector width divides them, left as it was
])  # fmt: skip
def test_a_sum_over_outer_axes_adds_whole_rows_as_vectors(shape, axes, vectorized, rng):
    """A reduction over the outer axes (the bias gradient of a dense layer) adds each input
    row's contiguous values to a vector of outputs, not one output at a time down a column."""
    from tvm import topi

    x = te.placeholder(shape, name="x")
    for name, out, reference in [("sum", topi.sum(x, axis=list(axes)), tf.reduce_sum),
                                 ("max", topi.max(x, axis=list(axes)), tf.reduce_max)]:  # fmt: skip
        script = default_cpu_schedule(tvm.IRModule({"f": te.create_prim_func([x, out])})).script()
        assert ("_update" in script and "T.vectorized" in script) == vectorized, script
        op = tftvm.op([x], [out], name=f"sched_columns_{name}_{'x'.join(map(str, shape))}")
        xv = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(op(xv).numpy(), reference(xv, axis=axes).numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape, perm, tiled", [
    ((64, 48), (1, 0), True),         # a matmul gradient's transposed operand
    ((2, 32, 48), (0, 2, 1), True),   # per batch
    ((32, 8, 32), (2, 1, 0), True),   # the middle axis stays between the tiled ones
    ((20, 30), (1, 0), False),        # no whole vectors either way: the plain loop
])  # fmt: skip
def test_a_transpose_runs_in_square_tiles(shape, perm, tiled, rng):
    from tvm import topi

    x = te.placeholder(shape, name="x")
    out = topi.transpose(x, list(perm))
    script = default_cpu_schedule(tvm.IRModule({"f": te.create_prim_func([x, out])})).script()
    lanes = vector_lanes("float32")
    assert (script.count(f" * {lanes} + ") >= 2) == tiled, script  # both axes split by the vector width
    op = tftvm.op([x], [out], name=f"sched_transpose_{'x'.join(map(str, shape))}")
    xv = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(op(xv).numpy(), np.transpose(xv, perm))


@pytest.mark.parametrize("m, n, k, copied", [
    (512, 256, 64, True),   # a dense layer's input gradient, dY·Wᵀ: Wᵀ copied, then register tiles
    (64, 1024, 1024, True),  # an MLP's (batch 64): Wᵀ (4 MB) copied on all threads
    (64, 48, 32, False),    # small: dot products along the contiguous rows, as Q·Kᵀ
])  # fmt: skip
def test_a_large_matmul_with_b_transposed_copies_b_once(m, n, k, copied, rng):
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((n, k), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[j, r], axis=r), name="C")
    script = scheduled_script(A, B, C)
    assert ("B_global" in script) == copied, script
    if copied:  # the copy in lanes x lanes tiles (each of its rows a vector store), on all threads if large
        copy = script[script.index("B_global = "):script.index("B_global[v1, v0] = B[v0, v1]")]
        lanes = vector_lanes("float32")
        assert f"T.vectorized({lanes})" in copy and ("T.parallel" in copy) == (n * k >= 1 << 18), copy
    op = tftvm.op([A, B], [C], name=f"sched_abt_{m}x{n}x{k}")
    av = rng.standard_normal((m, k)).astype(np.float32)
    bv = rng.standard_normal((n, k)).astype(np.float32)
    np.testing.assert_allclose(op(av, bv).numpy(), tf.linalg.matmul(av, bv, transpose_b=True).numpy(),
                               rtol=1e-4, atol=1e-4)  # fmt: skip
