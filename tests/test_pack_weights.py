"""Conv2D and matmul with constant weights run over weights packed by column tile: same
numbers as TF."""
import numpy as np
import pytest
import tensorflow as tf
import tftvm
import tvm
from tftvm.graph.lowering.program import fuse
from tvm import relax, tirx


def conv_module(weights: np.ndarray, *, constant: bool = True, groups: int = 1):
    """A Relax main: NHWC conv2d of a None-batch input with `weights` (HWIO), then ReLU."""
    kh, kw, ci, co = weights.shape
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((tirx.Var("n", "int64"), 8, 8, ci * groups), str(weights.dtype)))
    w = relax.const(weights) if constant else relax.Var("w", relax.TensorType(weights.shape, str(weights.dtype)))
    with bb.function("main", [x] if constant else [x, w]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, w, padding=1, groups=groups, data_layout="NHWC", kernel_layout="HWIO"))
            out = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(out)
    return bb.get()


def weight_shapes(mod) -> list[tuple]:
    """The shapes of the buffers the fused kernels take that have no symbolic dim: the weights."""
    shapes = [tuple(p.ty.shape) for f in mod.functions.values() if isinstance(f, tirx.PrimFunc)
              for p in f.params if isinstance(p.ty, tirx.BufferType)]  # fmt: skip
    return [tuple(int(d) for d in s) for s in shapes if all(isinstance(d, tirx.IntImm) for d in s)]


@pytest.mark.parametrize("co, width", [(64, 32), (88, 8), (12, 4)])
def test_constant_weights_are_packed_by_the_schedules_tile_width(co, width, rng):
    weights = rng.standard_normal((3, 3, 16, co)).astype(np.float32)
    assert weight_shapes(fuse(conv_module(weights))) == [(co // width, 3, 3, 16, width)]


def test_weights_computed_from_constants_alone_are_packed_once(rng):
    """A frozen graph's batch norm scale folded into the conv's weights (fold_scales) makes
    them `w * s`, constants that FoldConstant folds only after legalization: they are packed
    all the same, and the packing is folded with them."""
    weights = rng.standard_normal((3, 3, 16, 64)).astype(np.float32)
    scale = rng.standard_normal(64).astype(np.float32)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((tirx.Var("n", "int64"), 8, 8, 16), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            w = bb.emit(relax.op.multiply(relax.const(weights), relax.const(scale)))
            y = bb.emit(relax.op.nn.conv2d(x, w, padding=1, data_layout="NHWC", kernel_layout="HWIO"))
            out = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(out)
    fused = fuse(bb.get())
    assert weight_shapes(fused) == [(2, 3, 3, 16, 32)]
    kernels = [gv.name_hint for gv, f in fused.functions.items() if isinstance(f, tirx.PrimFunc)]
    assert not any("pack" in name or "multiply" in name for name in kernels), kernels  # folded at compile time
    ex = tvm.compile(fused, target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    data = rng.standard_normal((2, 8, 8, 16)).astype(np.float32)
    want = tf.nn.relu(tf.nn.conv2d(data, weights * scale, 1, "SAME")).numpy()
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(data)).numpy(), want, rtol=1e-4, atol=1e-4)


def test_a_matmul_at_the_end_of_a_long_chain_of_activations_compiles(rng):
    """Whether a matmul's right operand comes from constants is found by walking its bindings
    back: through a decoder's thousands of activations (GPT-2's generate step, 12 layers),
    with a stack, where recursion passed Python's limit and the cluster stayed in TF."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = x
            for _ in range(3000):
                y = bb.emit(relax.op.add(y, relax.const(np.float32(0.001))))
            out = bb.emit_output(relax.op.matmul(x, y))
        bb.emit_func_output(out)
    ex = tvm.compile(fuse(bb.get()), target="llvm")
    data = rng.standard_normal((4, 4)).astype(np.float32)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(data)).numpy()
    np.testing.assert_allclose(got, data @ (data + np.float32(3.0)), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("why, module", [
    ("weights computed at run time", lambda w: conv_module(w, constant=False)),
    ("grouped conv", lambda w: conv_module(w[:, :, :8], groups=2)),
    ("no tile width divides 6 columns", lambda w: conv_module(w[..., :6])),
])  # fmt: skip
def test_other_convs_keep_tvms_layout(why, module, rng):
    weights = rng.standard_normal((3, 3, 16, 16)).astype(np.float32)
    shapes = weight_shapes(fuse(module(weights)))
    assert shapes and all(len(s) == 4 for s in shapes), why


@pytest.mark.parametrize("side, kernel, strides, dilations, padding, co, dtype", [
    (9, 3, 1, 1, "SAME", 64, np.float32),     # 2 vectors per tile
    (8, 3, 2, 1, "SAME", 32, np.float32),     # stride 2, SAME pads 0 on top and 1 below
    (9, 3, 1, 2, "VALID", 88, np.float32),    # dilated, 88 columns: 8-wide tiles
    (4, 3, 1, 1, "SAME", 96, np.float32),     # more columns than pixels: column blocks walked first
    (7, 1, 1, 1, "VALID", 12, np.float32),    # 4-wide tiles
    (19, 3, 1, 1, "SAME", 56, np.float32),    # 8-wide tiles of 19 rows
    (6, 3, 1, 1, "SAME", 6, np.float32),      # not packed
    (6, 3, 1, 1, "SAME", 24, np.float64),     # 8 lanes of doubles
])  # fmt: skip
def test_packed_convs_match_tf(side, kernel, strides, dilations, padding, co, dtype, rng):
    w = tf.constant(rng.standard_normal((kernel, kernel, 20, co)).astype(dtype))
    b = tf.constant(rng.standard_normal(co).astype(dtype))

    def model(x):
        return tf.nn.relu(tf.nn.conv2d(x, w, strides, padding, dilations=dilations) + b)

    optimized = tftvm.optimize(model, [tf.TensorSpec([None, side, side, 20], dtype)], min_cluster_size=1)
    assert optimized.summary().fraction == 1.0
    for batch in (1, 3):
        x = rng.standard_normal((batch, side, side, 20)).astype(dtype)
        tol = 1e-4 if dtype == np.float32 else 1e-10
        np.testing.assert_allclose(optimized(x).numpy(), model(x).numpy(), rtol=tol, atol=tol)


def test_a_packed_conv_is_register_tiled_by_the_default_schedule(rng):
    """The packed index j // width names the tile, not a gather: the conv keeps its register
    tiles (a write-back of each tile from a local accumulator), as with unpacked weights."""
    from tftvm.schedule import default_cpu_schedule

    weights = rng.standard_normal((3, 3, 16, 64)).astype(np.float32)
    fused = fuse(conv_module(weights))
    (conv,) = [f for gv, f in fused.functions.items() if isinstance(f, tirx.PrimFunc) and "conv2d" in gv.name_hint]
    script = default_cpu_schedule(tvm.IRModule({"conv": conv})).script()
    assert 'scope="local"' in script and "T.vectorized" in script and "T.parallel" in script


def matmul_module(weights: np.ndarray, *, rank: int = 2, constant: bool = True):
    """A Relax main: a None-row input [n, (4,) K] times `weights` [K, N], plus 1, then ReLU."""
    k, cols = weights.shape
    bb = relax.BlockBuilder()
    rows = (tirx.Var("n", "int64"),) + (4,) * (rank - 2)
    x = relax.Var("x", relax.TensorType((*rows, k), str(weights.dtype)))
    w = relax.const(weights) if constant else relax.Var("w", relax.TensorType(weights.shape, str(weights.dtype)))
    with bb.function("main", [x] if constant else [x, w]):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(x, w))
            out = bb.emit_output(relax.op.nn.relu(relax.op.add(y, relax.const(np.ones(cols, weights.dtype)))))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("cols, packed", [
    (64, (2, 16, 32)),     # two vectors per tile
    (1000, (32, 16, 32)),  # 8-wide tiles would divide 1000: padded to 1024, 32 wide
    (12, (3, 16, 4)),      # 4-wide tiles; padding to 16 would add a third
    (6, None),             # no tile width divides 6 and padding to 8 adds a third: not packed
])  # fmt: skip
def test_constant_matmul_weights_are_packed_by_column_block_padded_to_wide_tiles(cols, packed, rng):
    weights = rng.standard_normal((16, cols)).astype(np.float32)
    def matrices(mod):  # not the bias
        return [s for s in weight_shapes(fuse(mod)) if len(s) > 1]

    assert matrices(matmul_module(weights)) == [packed if packed else (16, cols)]
    assert matrices(matmul_module(weights, constant=False)) == [(16, cols)]  # computed: as it is


@pytest.mark.parametrize("rank, k, cols, dtype", [
    (2, 48, 1000, np.float32),
    (2, 20, 64, np.float32),
    (3, 20, 12, np.float32),    # batch dims before the rows
    (2, 20, 6, np.float32),     # not packed
    (2, 20, 24, np.float64),    # 8 lanes of doubles
])  # fmt: skip
def test_packed_matmuls_match_tf(rank, k, cols, dtype, rng):
    w = tf.constant(rng.standard_normal((k, cols)).astype(dtype))
    b = tf.constant(rng.standard_normal(cols).astype(dtype))

    def model(x):
        return tf.nn.relu(tf.tensordot(x, w, 1) + b) if rank == 3 else tf.nn.relu(tf.matmul(x, w) + b)

    shape = [None, 4, k] if rank == 3 else [None, k]
    optimized = tftvm.optimize(model, [tf.TensorSpec(shape, dtype)], min_cluster_size=1, keep_faster=False)
    assert optimized.summary().fraction == 1.0
    for rows in (1, 3, 9):
        x = rng.standard_normal([rows] + shape[1:]).astype(dtype)
        tol = 1e-4 if dtype == np.float32 else 1e-10
        np.testing.assert_allclose(optimized(x).numpy(), model(x).numpy(), rtol=tol, atol=tol)


def test_matmul_weights_held_between_calls_are_packed_once_in_the_preparation(rng):
    """Under enable() a model's weights are variables held still (memoized): the packing goes
    into the weight preparation, and the matmul kernel reads the packed blocks."""
    from conftest import tf_graph
    from tftvm.graph.frontend import to_relax
    from tftvm.graph.lowering.program import RelaxProgram

    def dense(x, w, b):
        return tf.nn.relu(tf.matmul(x, w) + b)

    w, b = (tf.constant(rng.standard_normal(s).astype(np.float32)) for s in ((24, 1000), (1000,)))
    nodes, inputs, outputs, _ = tf_graph(dense, [tf.TensorSpec([None, 24]), tf.TensorSpec(w.shape), tf.TensorSpec(b.shape)])
    program = RelaxProgram(to_relax(nodes, inputs, outputs), name="dense", weights=[1, 2], memoize_weights=True)
    (main,) = [k for k in program.kernels if "matmul" in k.name and "transform_params" not in k.name]
    assert [t.dims for t in main.signature.inputs if len(t.dims) == 3] == [("c32", "c24", "c32")], main.signature.in_spec
    x = tf.constant(rng.standard_normal((3, 24)).astype(np.float32))
    for _ in range(2):
        np.testing.assert_allclose(program(x, w, b), dense(x, w, b), rtol=1e-5, atol=1e-5)
        w = tf.constant(rng.standard_normal((24, 1000)).astype(np.float32))
