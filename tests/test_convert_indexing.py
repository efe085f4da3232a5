"""Gather/scatter, segment, sort/scan, range and broadcast converters against TF, their refusals,
and the Cast dtype matrix."""
import keras
import numpy as np
import pytest
import tensorflow as tf
import tftvm
from tftvm import enable_pass
from tftvm.graph.frontend import Unsupported, to_relax
from tftvm.graph.frontend.ops.indexing import const_range
from tftvm.graph.lowering.program import RelaxProgram

from conftest import check_converter, tf_graph

F32, I32 = tf.float32, tf.int32


def spec(shape, dtype=F32):
    return tf.TensorSpec(shape, dtype)


def refused(fn, specs, match):
    nodes, inputs, outputs, _ = tf_graph(fn, specs)
    with pytest.raises(Unsupported, match=match):
        to_relax(nodes, inputs, outputs)


def normal(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# GatherNd and ScatterNd ----------------------------------------------------------------------

@pytest.mark.parametrize("depth", [1, 2, 3], ids=["rows", "vectors", "scalars"])
def test_gather_nd(depth, rng):
    def feed(n, m):  # m in-range coordinates into an (n, 3, 4) tensor
        coords = np.stack([rng.integers(0, s, m) for s in (n, 3, 4)[:depth]], -1).astype(np.int32)
        return [normal(rng, n, 3, 4), coords]

    specs = [spec([None, 3, 4]), spec([None, depth], I32)]
    check_converter(tf.gather_nd, specs, [feed(2, 5), feed(4, 3)], "GatherNd")


def scatter_feed(rng, n, cols, rows):
    """Integer coordinates (with duplicates) in the first `cols` columns, updates after them."""
    return [np.concatenate([rng.integers(0, rows, (n, cols)), normal(rng, n, 3)], 1).astype(np.float32)]


@pytest.mark.parametrize("cols, shape", [(1, [5]), (1, [4, 3]), (2, [3, 4])],
                         ids=["elements", "rows", "2d"])  # fmt: skip
def test_scatter_nd_adds_duplicates(cols, shape, rng):
    def fn(x):
        upd = x[:, cols] if len(shape) == cols else x[:, cols:]
        return tf.scatter_nd(tf.cast(x[:, :cols], I32), upd, shape)

    feeds = [scatter_feed(rng, n, cols, min(shape[:cols])) for n in (9, 4)]
    check_converter(fn, [spec([None, cols + 3])], feeds, "ScatterNd")


def test_scatter_nd_ignores_bad_indices_as_tf_does(rng):
    def fn(x):
        return tf.raw_ops.ScatterNd(indices=tf.cast(x[:, :1], I32), updates=x[:, 1], shape=[4],
                                    bad_indices_policy="IGNORE")  # fmt: skip

    bad = np.array([[1, 2.0], [7, 3.0], [-2, 5.0], [1, 0.5]], np.float32)  # 7 and -2 are skipped
    feeds = [[bad], [scatter_feed(rng, 6, 1, 4)[0][:, :2]]]
    check_converter(fn, [spec([None, 2])], feeds, "ScatterNd")


@pytest.mark.parametrize("kind", ["update", "add", "sub", "max", "min"])
@pytest.mark.parametrize("cols", [1, 2], ids=["rows", "elements"])
def test_tensor_scatter(kind, cols, rng):
    """tf.tensor_scatter_nd_*: rows (one coordinate) or elements (two) of a (None, 3) tensor;
    duplicate indices for the reductions (TF leaves their order open for update)."""
    op = getattr(tf, f"tensor_scatter_nd_{kind}")

    def fn(t, x):
        return op(t, tf.cast(x[:, :cols], I32), x[:, cols] if cols == 2 else x[:, 1:])

    def feed(n, m):
        rows = rng.permutation(n)[:m] if kind == "update" else rng.integers(0, n, m)
        coords = np.stack([rows, rng.integers(0, 3, m)], 1)[:, :cols]
        return [normal(rng, n, 3), np.concatenate([coords, normal(rng, m, 4 - cols)], 1).astype(np.float32)]

    check_converter(fn, [spec([None, 3]), spec([None, 4])], [feed(5, 4), feed(2, 2), feed(3, 0)],
                    "TensorScatter" + kind.capitalize())  # fmt: skip


def test_tensor_scatter_with_indices_of_rank_1_is_refused():
    fn = lambda t, u: tf.tensor_scatter_nd_update(t, [1, 2], u[0, 0])  # noqa: E731
    refused(fn, [spec([3, 4]), spec([2, 4])], "indices of rank 1")


def test_scatter_nd_with_unrelated_dims_is_refused():
    refused(lambda i, u: tf.scatter_nd(i, u, [5]), [spec([None, 1], I32), spec([None])], "not provably")


def test_gather_nd_ignore_policy_is_refused():
    fn = lambda p, i: tf.raw_ops.GatherNd(params=p, indices=i, bad_indices_policy="IGNORE")  # noqa: E731
    refused(fn, [spec([None, 3]), spec([None, 2], I32)], "bad_indices_policy IGNORE")


# OneHot, Range, Cumsum, TopKV2 ---------------------------------------------------------------

@pytest.mark.parametrize("axis, on, off, dtype", [(-1, 1.0, 0.0, F32), (0, 2.5, -1.0, F32), (1, 7, 3, I32)],
                         ids=["last", "first_f32", "middle_i32"])  # fmt: skip
def test_one_hot(axis, on, off, dtype, rng):
    fn = lambda i: tf.one_hot(i, 4, on_value=on, off_value=off, axis=axis, dtype=dtype)  # noqa: E731
    feeds = [[rng.integers(-1, 6, (n, 2)).astype(np.int32)] for n in (5, 2)]  # -1 and >= 4: all off
    check_converter(fn, [spec([None, 2], I32)], feeds, "OneHot")


@pytest.mark.parametrize("args, dtype", [((0, 10, 3), I32), ((7, -2, -2), I32), ((0.1, 3.0, 0.3), F32)],
                         ids=["up", "down", "float"])  # fmt: skip
def test_range_of_constants(args, dtype, rng):
    fn = lambda x: x + tf.cast(tf.range(*args, dtype=dtype), F32)  # noqa: E731
    n = len(range(*args)) if dtype == I32 else 10
    check_converter(fn, [spec([None, n])], [[normal(rng, 2, n)], [normal(rng, 3, n)]], "Range")


def test_range_to_a_symbolic_limit(rng):
    fn = lambda x: tf.range(tf.shape(x)[0])  # noqa: E731
    check_converter(fn, [spec([None, 2])], [[normal(rng, 5, 2)], [normal(rng, 2, 2)]], "Range")


def test_range_to_a_symbolic_limit_with_a_step_is_refused():
    refused(lambda x: tf.range(0, tf.shape(x)[0], 2), [spec([None])], "start 0 and delta 1")


def test_range_tf_would_reject_is_refused():
    with pytest.raises(Unsupported, match="TF raises"):  # TF's shape inference stops such a trace
        const_range(0, 4, -1, "int32")


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum(exclusive, reverse, rng):
    fn = lambda x: tf.math.cumsum(x, axis=1, exclusive=exclusive, reverse=reverse)  # noqa: E731
    check_converter(fn, [spec([None, 5])], [[normal(rng, 3, 5)], [normal(rng, 1, 5)]], "Cumsum")


def test_cumsum_int_along_the_symbolic_axis(rng):
    fn = lambda x: tf.math.cumsum(x, axis=0, reverse=True)  # noqa: E731
    feeds = [[rng.integers(-9, 9, (n, 2)).astype(np.int32)] for n in (6, 3)]
    check_converter(fn, [spec([None, 2], I32)], feeds, "Cumsum")


@pytest.mark.parametrize("dtype, index_type", [(F32, I32), (tf.int64, tf.int64), (tf.float16, I32),
                                               (tf.uint8, I32)])  # fmt: skip
def test_top_k_distinct_values(dtype, index_type, rng):
    fn = lambda x: tf.math.top_k(x, 3, index_type=index_type)  # noqa: E731
    feeds = [[np.stack([rng.permutation(6) for _ in range(n)]).astype(dtype.as_numpy_dtype)]
             for n in (4, 1)]  # fmt: skip
    check_converter(fn, [spec([None, 6], dtype)], feeds, "TopKV2")


def test_top_k_ties_give_the_lower_index_first_like_tf(rng):
    feeds = [[rng.integers(0, 3, (n, 8)).astype(np.float32)] for n in (5, 2)]  # many ties
    check_converter(lambda x: tf.math.top_k(x, 4), [spec([None, 8])], feeds, "TopKV2")


@pytest.mark.parametrize("fn, specs, match", [
    (lambda x: tf.math.top_k(x, 2, sorted=False), [spec([None, 4])], "sorted=False"),
    (lambda x: tf.math.top_k(x, 2), [spec([4, None])], "static dims"),
    (lambda x: tf.math.top_k(x, 0), [spec([None, 4])], "outside"),
    (lambda x: tf.math.top_k(x, 2), [spec([None, 4], tf.bfloat16)], "TopKV2 of bfloat16"),
], ids=["unsorted", "symbolic_axis", "k_zero", "bfloat16"])  # fmt: skip
def test_bad_top_k_is_refused(fn, specs, match):
    refused(fn, specs, match)


@pytest.mark.parametrize("fn, specs", [
    (lambda i, on: tf.one_hot(i, 3, on_value=on), [spec([None], I32), spec([])]),
    (lambda x, a: tf.math.cumsum(x, axis=a), [spec([None, 2]), spec([], I32)]),
    (lambda i, u, s: tf.scatter_nd(i, u, s), [spec([2, 1], I32), spec([2]), spec([1], I32)]),
    (lambda d, i, n: tf.math.unsorted_segment_max(d, i, n), [spec([3]), spec([3], I32), spec([], I32)]),
    (lambda x, k: tf.math.top_k(x, k)[0], [spec([None, 4]), spec([], I32)]),
], ids=["one_hot_on_value", "cumsum_axis", "scatter_nd_shape", "segment_count", "top_k_k"])  # fmt: skip
def test_runtime_attribute_inputs_are_refused(fn, specs):
    refused(fn, specs, "must be a constant")


def test_where_coordinates_are_refused():
    refused(lambda x: tf.where(x > 0), [spec([None, 3])], "depends on the data")


# Unpack, BroadcastTo, Round ------------------------------------------------------------------

@pytest.mark.parametrize("axis", [1, -1])
def test_unpack(axis, rng):
    fn = lambda x: tf.unstack(x, axis=axis)  # noqa: E731
    feeds = [[normal(rng, n, 3, 2)] for n in (4, 1)]
    check_converter(fn, [spec([None, 3, 2])], feeds, "Unpack")


def test_unpack_of_a_symbolic_shape_feeds_reshape(rng):
    fn = lambda x: tf.reshape(x, tf.unstack(tf.shape(x))[::-1])  # noqa: E731
    check_converter(fn, [spec([None, 3])], [[normal(rng, n, 3)] for n in (2, 5)], "Unpack")


def test_broadcast_to_a_symbolic_shape(rng):
    fn = lambda x: tf.broadcast_to(x, tf.concat([tf.shape(x)[:1], [4]], 0))  # noqa: E731
    check_converter(fn, [spec([None, 1])], [[normal(rng, 3, 1)], [normal(rng, 1, 1)]], "BroadcastTo")


def test_broadcast_to_a_constant_shape(rng):
    fn = lambda x: tf.broadcast_to(x, [2, 3, 4])  # noqa: E731
    check_converter(fn, [spec([3, 1])], [[normal(rng, 3, 1)]], "BroadcastTo")


@pytest.mark.parametrize("dtype", [tf.float16, F32, tf.float64])
def test_round_half_to_even(dtype, rng):
    def feed(n):
        halves = np.arange(-n, n) + 0.5  # every .5 case: TF goes to the even neighbour
        return [np.concatenate([halves, rng.uniform(-9, 9, n)]).astype(dtype.as_numpy_dtype)]

    check_converter(tf.round, [spec([None], dtype)], [feed(6), feed(3)], "Round")


def test_round_of_integers_is_refused():
    refused(lambda x: tf.raw_ops.Round(x=x), [spec([None], I32)], "returns zeros")


# Segment reductions --------------------------------------------------------------------------

IDS = [0, 0, 2, 2, 2, 5]  # segments 1, 3 and 4 are empty


@pytest.mark.parametrize("kind, dtype", [(k, F32) for k in ("sum", "mean", "prod", "max", "min")]
                         + [("mean", I32)])  # ints: Mean truncates  # fmt: skip
def test_sorted_segment_with_constant_ids(kind, dtype, rng):
    fn = lambda d: getattr(tf.math, f"segment_{kind}")(d, tf.constant(IDS))  # noqa: E731
    feeds = [[rng.integers(-7, 8, (6, n)).astype(dtype.as_numpy_dtype)] for n in (3, 1)]
    check_converter(fn, [spec([6, None], dtype)], feeds, "Segment" + kind.capitalize())


@pytest.mark.parametrize("fn, match", [
    (lambda d, i: tf.math.segment_sum(d, i), "non-constant segment_ids"),
    (lambda d, i: tf.math.segment_max(d, tf.constant([1, 0, 2])), "sorted"),
], ids=["runtime_ids", "unsorted_ids"])  # fmt: skip
def test_sorted_segment_refusals(fn, match):
    refused(fn, [spec([3, 2]), spec([3], I32)], match)


@pytest.mark.parametrize("kind, dtype", [(k, F32) for k in ("sum", "prod", "max", "min")]
                         + [("max", I32)])  # empty: the dtype's lowest, for ints too  # fmt: skip
def test_unsorted_segment(kind, dtype, rng):
    def fn(d):  # ids ride in column 0 so they share data's symbolic dim; -1 is dropped, as in TF
        return getattr(tf.math, f"unsorted_segment_{kind}")(d[:, 1:], tf.cast(d[:, 0], I32), 5)

    def feed(n):
        return [np.concatenate([rng.integers(-1, 4, (n, 1)), rng.integers(-7, 8, (n, 2))], 1)
                .astype(dtype.as_numpy_dtype)]  # segment 4 is always empty  # fmt: skip

    op_type = "UnsortedSegment" + kind.capitalize()
    check_converter(fn, [spec([None, 3], dtype)], [feed(7), feed(2)], op_type)


def test_unsorted_segment_with_unrelated_dims_is_refused():
    fn = lambda d, i: tf.math.unsorted_segment_sum(d, i, 3)  # noqa: E731
    refused(fn, [spec([None, 2]), spec([None], I32)], "not provably")


# Cast across the dtype matrix ----------------------------------------------------------------

DTYPES = ["float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
          "uint16", "uint32", "uint64", "bool"]  # fmt: skip


def cast_values(src: str, n: int) -> np.ndarray:
    if src == "bool":
        return np.arange(n) % 2 == 0
    values = np.array([0, 1, 2, 7, 100, 127, -1, -7, 2.5, 2.7, -1.75, 0.3, -0.5] * n)
    values = values if "float" in src else np.trunc(values)
    return np.abs(values) if src.startswith("uint") else values


@pytest.mark.parametrize("src", DTYPES)
def test_cast_to_and_from_every_dtype(src):
    """One program per source dtype casts to all the others, exactly as TF does. Negative floats
    go to unsigned types through Abs: that cast is undefined in C++, and TF's answers vary."""
    t = tf.as_dtype(src)
    dsts = [d for d in DTYPES if d != src]

    def fn(x):
        return [tf.cast(tf.abs(x) if t.is_floating and d.startswith("uint") else x, d) for d in dsts]

    nodes, inputs, outputs, _ = tf_graph(fn, [spec([None], t)])
    program = RelaxProgram(to_relax(nodes, inputs, outputs), name=f"cast_from_{src}")
    for n in (1, 2):
        x = tf.constant(cast_values(src, n), dtype=t)
        for d, got, want in zip(dsts, program(x), fn(x)):
            assert got.dtype == want.dtype and got.shape == want.shape, d
            as_f64 = got.numpy().astype(np.float64), want.numpy().astype(np.float64)
            np.testing.assert_array_equal(*as_f64, err_msg=d)


def test_small_int_dtypes_are_offloaded(rng):
    """mark.py lets the dtypes the Cast matrix verifies into clusters."""
    fn = lambda x: tf.cast(tf.cast(x, tf.int16) * 3 + 1, tf.uint8)  # noqa: E731
    fast = tftvm.optimize(fn, input_signature=[tf.TensorSpec([None], tf.uint8)], min_cluster_size=1)
    for n in (3, 6):
        x = rng.integers(0, 256, n).astype(np.uint8)
        np.testing.assert_array_equal(fast(x).numpy(), fn(x).numpy())
    assert fast.summary().fraction == 1.0, fast.report()


# The user path -------------------------------------------------------------------------------

def test_keras_embedding_with_cumsum_one_hot_and_gather_nd(rng):
    keras.utils.set_random_seed(0)
    tokens = keras.Input((5,), dtype="int32")
    emb = keras.layers.Embedding(10, 4)(tokens)
    running = keras.ops.cumsum(emb, axis=1)
    hot = keras.ops.one_hot(tokens, 10)
    # The running sum at the last position, picked by GatherNd over the time-major layout.
    last = keras.layers.Lambda(lambda e: tf.gather_nd(tf.transpose(e, [1, 0, 2]), [[4]])[0])(running)
    features = keras.ops.concatenate([last, keras.ops.sum(hot, 1)], -1)
    model = keras.Model(tokens, keras.layers.Dense(3)(features))
    fast = tftvm.optimize(model, input_signature=[tf.TensorSpec([None, 5], tf.int32)])
    for n in (1, 4):
        x = rng.integers(0, 10, (n, 5)).astype(np.int32)
        np.testing.assert_allclose(fast(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)
    in_tf = {op.op for op in fast.summary().in_tf}
    assert not in_tf & {"Cumsum", "OneHot", "GatherNd"}, fast.report()


# Out-of-range indices raise, as TF's CPU kernels do: a clamped index would be a silent wrong
# answer (an out-of-vocabulary token's embedding row). Each case: fn(x, idx), x's spec, the
# indices' depth (last dim), and the bound of the first index coordinate. Indices feed in range, past the
# bound, and below 0.
X = np.arange(24, dtype=np.float32).reshape(4, 6)
OUT_OF_RANGE = {
    "GatherV2": (lambda x, i: tf.gather(x, i[:, 0]), spec([None, 6]), 1, 4),
    "GatherV2 axis 1": (lambda x, i: tf.gather(x, i, axis=1), spec([4, None]), 1, 6),
    "GatherNd": (tf.gather_nd, spec([None, None]), 2, 4),
    "ScatterNd": (lambda x, i: tf.scatter_nd(i, tf.ones([tf.shape(i)[0], 6]), [4, 6]), spec([4, 6]), 1, 4),
    "TensorScatterUpdate": (lambda x, i: tf.tensor_scatter_nd_update(x, i, tf.zeros([tf.shape(i)[0], 6])),
                            spec([None, 6]), 1, 4),  # fmt: skip
    "TensorScatterAdd": (lambda x, i: tf.tensor_scatter_nd_add(x, i, tf.ones([tf.shape(i)[0]])),
                         spec([4, None]), 2, 4),  # fmt: skip
    "UnsortedSegmentSum": (lambda x, i: tf.math.unsorted_segment_sum(x[:3], i[:, 0], 4), spec([4, 6]), 1, 4),
}


@pytest.mark.parametrize("case", sorted(OUT_OF_RANGE))
def test_out_of_range_indices_raise_as_in_tf(case, rng):
    fn, x_spec, depth, bound = OUT_OF_RANGE[case]
    op_type = case.split()[0]
    rows = 3 if op_type == "UnsortedSegmentSum" else None  # its ids must provably match data's rows
    nodes, inputs, outputs, op_types = tf_graph(fn, [x_spec, spec([rows, depth], I32)])
    assert op_type in op_types, sorted(op_types)
    program = RelaxProgram(to_relax(nodes, inputs, outputs), name=f"oob_{op_type}")
    fine = np.zeros((3, depth), np.int32)
    fine[:, 0] = [0, bound - 1, 1]
    np.testing.assert_array_equal(program(X, fine).numpy(), fn(X, fine).numpy())
    for bad in (bound, 10**6, -1):
        idx = fine.copy()
        idx[1, 0] = bad
        if bad < 0 and op_type == "UnsortedSegmentSum":  # TF drops negative segment ids
            np.testing.assert_array_equal(program(X, idx).numpy(), fn(X, idx).numpy())
            continue
        with pytest.raises(tf.errors.InvalidArgumentError):
            fn(X, idx)  # the reference: TF raises too
        with pytest.raises(tf.errors.InvalidArgumentError, match=f"{op_type} .*'(indices|segment_ids)' is not in"):
            program(X, idx)


def test_out_of_range_index_raises_in_every_path(rng):
    """An embedding lookup of an out-of-vocabulary token raises TF's InvalidArgumentError through
    optimize, compile_model and enable(), as the Keras model itself does."""
    keras.utils.set_random_seed(0)
    tokens = keras.Input((4,), dtype="int32")
    model = keras.Model(tokens, keras.layers.Dense(3)(keras.layers.Embedding(10, 8)(tokens)))
    sig = [tf.TensorSpec([None, 4], tf.int32)]
    good, bad = np.array([[1, 2, 9, 0]], np.int32), np.array([[1, 2, 10, 0]], np.int32)
    with pytest.raises(tf.errors.InvalidArgumentError):
        model(bad)
    fast = tftvm.optimize(model, input_signature=sig, keep_faster=False)
    whole = tftvm.compile_model(model, input_signature=sig, keep_faster=False)
    assert fast.summary().fraction == 1.0 and whole.summary().fraction == 1.0
    with tftvm.enabled(keep_faster=False):
        enabled = tf.function(model.__call__, input_signature=sig)
        for name, path in {"optimize": fast, "compile_model": whole, "enable": enabled}.items():
            np.testing.assert_allclose(path(good).numpy(), model(good).numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
            with pytest.raises(tf.errors.InvalidArgumentError, match="GatherV2 .*is not in"):
                path(bad)
    model_rewrites = [r for r in enable_pass.rewrites() if "GatherV2" in r.report]
    assert model_rewrites and all(r.offloaded == r.compute_nodes for r in model_rewrites), tftvm.enabled_report()


# Where: an output as long as the data says -----------------------------------------------------

WHERE = {
    "of a comparison": (lambda x: tf.where(x > 0.5), [None, 3]),
    "of floats (NaN is true)": (lambda x: tf.where(x * 2.0), [None, 3]),
    "gathered": (lambda x: tf.gather_nd(x, tf.where(x > 0.5)) * 2.0, [None, 3]),
    "counted": (lambda x: tf.shape(tf.where(x > 0.5))[0] + 1, [None, 3]),
    "of rank 3": (lambda x: tf.where(tf.reshape(x, [-1, 1, 3]) > 0.2), [None, 3]),
}


@pytest.mark.parametrize("name", sorted(WHERE))
def test_where_runs_in_compile_models_vm(name, rng):
    """The VM allocates an output whose length the data decides: Where (Relax's nonzero,
    transposed) converts there, row-major and int64 as TF gives it."""
    fn, shape = WHERE[name]
    model = tftvm.compile_model(tf.function(fn), [spec(shape)], keep_faster=False)
    assert "in TF: 0" in model.report().splitlines()[0], model.report()
    feeds = [normal(rng, 4, 3), np.array([[np.nan, 0, 1], [0, -0.0, 0]], np.float32), np.zeros((0, 3), np.float32),
             np.zeros((2, 3), np.float32)]  # fmt: skip
    for x in feeds:
        got, want = np.asarray(model(x)), fn(tf.constant(x)).numpy()
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
        np.testing.assert_array_equal(got, want)


def test_where_stays_in_tf_in_a_cluster():
    """A tftvm op's output shapes follow from its input shapes: optimize leaves Where to TF,
    and says why."""
    fn = tf.function(lambda x: tf.gather_nd(x * 3.0, tf.where(x > 0.5)) + 1.0)
    optimized = tftvm.optimize(fn, [spec([None, 3])], keep_faster=False, min_cluster_size=1)
    assert "Where x1: Where: its output's shape depends on the data" in optimized.report(), optimized.report()
    x = np.array([[0.7, 0.1, 0.9], [0.2, 0.6, 0.0]], np.float32)
    np.testing.assert_array_equal(np.asarray(optimized(x)), fn(tf.constant(x)).numpy())
