"""A strided 1x1 conv's stride moved up into the ops that compute its input (ResNet v1's
stage transitions): the convs before it run at the stride, the numbers stay TF's."""
import numpy as np
import pytest
import tensorflow as tf
import tftvm
from tftvm.graph.lowering import fold_strides
from tvm import relax


@pytest.fixture
def folded(monkeypatch):
    """The modules fold_strides.fold returned in the test, on every path it ran on."""
    modules = []
    fold = fold_strides.fold

    def spy(mod):
        modules.append(fold(mod))
        return modules[-1]

    monkeypatch.setattr(fold_strides, "fold", spy)
    return modules


def calls(mod, name: str) -> list:
    """The calls of op `name` in `mod`'s Relax functions."""
    found = []
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, lambda e: found.append(e) if isinstance(e, relax.Call) and getattr(
                e.op, "name", "") == name else None)  # fmt: skip
    return found


def convs(mod) -> list[tuple[int, tuple]]:
    """(kernel height, strides) of every conv2d in `mod`'s Relax functions."""
    return [(int(c.args[1].ty.shape[0]), tuple(int(s) for s in c.attrs.strides)) for c in calls(mod, "relax.nn.conv2d")]


def op_count(mod, name: str) -> int:
    return len(calls(mod, name))


def transition(rng, kernel, padding, dilation, strides, residual, c=8):
    """ResNet v1's stage transition: a block (a KxK conv, a 1x1 expand with a batch norm, the
    residual add of the block's input, ReLU) whose output only a 1x1 conv and a 1x1 shortcut
    read, both with `strides`."""
    def weights(*shape):
        return tf.constant((rng.standard_normal(shape) / np.sqrt(np.prod(shape[:-1]))).astype(np.float32))

    w1, w2, w3, w4 = weights(kernel, kernel, c, c), weights(1, 1, c, c), weights(1, 1, c, 16), weights(1, 1, c, 16)
    b1, scale, shift = weights(c), weights(c) + 1, weights(c)

    def model(x):
        y = tf.nn.relu(tf.nn.conv2d(x, w1, 1, padding, dilations=dilation) + b1)
        z = tf.nn.conv2d(y, w2, 1, "VALID") * scale + shift
        r = tf.nn.relu(z + x) if residual else tf.nn.relu(z)
        return tf.nn.conv2d(r, w3, strides, "VALID") + tf.nn.conv2d(r, w4, strides, "VALID")

    return model


def check(model, side, folded, c=8, tol=1e-5, **compile_args):
    spec = [tf.TensorSpec([None, side, side, c], tf.float32)]
    ways = {"optimize": tftvm.optimize(model, spec, min_cluster_size=1, keep_faster=False),
            "compile_model": tftvm.compile_model(model, spec, keep_faster=False, **compile_args)}  # fmt: skip
    if compile_args:
        del ways["optimize"]
    else:  # enable(): the same function, rewritten by TF's graph pass
        traced = tf.function(model)

        def enabled(x):
            with tftvm.enabled(keep_faster=False, min_cluster_size=1):
                return traced(x)

        ways["enable"] = enabled
    rng = np.random.default_rng(3)
    for batch in (1, 3):
        x = rng.standard_normal((batch, side, side, c)).astype(np.float32)
        want = tf.nest.flatten(model(x))
        for way, fn in ways.items():
            for got, expected in zip(tf.nest.flatten(fn(x)), want, strict=True):
                got, expected = np.asarray(got), expected.numpy()
                assert got.shape == expected.shape, way
                np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * np.abs(expected).max(), err_msg=way)
    assert folded, "fold_strides did not run"
    return folded[-1]


@pytest.mark.parametrize("side, kernel, padding, dilation, strides, residual", [
    (8, 3, "SAME", 1, 2, True),        # ResNet50's
    (7, 3, "SAME", 1, 2, True),        # an odd side: 4 rows of 7
    (9, 3, "VALID", 1, 2, False),      # 7 rows -> 4
    (9, 3, "SAME", 2, 2, True),        # dilated
    (10, 3, "SAME", 1, 3, True),       # stride 3
    (8, 1, "VALID", 1, [2, 1], True),  # strides along height only; a 1x1 block
])  # fmt: skip
def test_the_blocks_before_a_strided_1x1_conv_run_at_its_stride(side, kernel, padding, dilation, strides, residual,
                                                                folded, rng):
    mod = check(transition(rng, kernel, padding, dilation, strides, residual), side, folded)
    s = (strides, strides) if isinstance(strides, int) else tuple(strides)
    if kernel > 1:  # the KxK conv takes the stride, the 1x1 convs after it run at stride 1
        assert sorted(convs(mod)) == [(1, (1, 1))] * 3 + [(kernel, s)]
    else:  # 1x1 all through: the stride goes to the first conv
        assert sorted(convs(mod)) == [(1, (1, 1))] * 3 + [(1, s)]
    # the block's input is read at every pixel by its first conv: the residual add slices it
    assert op_count(mod, "relax.strided_slice") == (1 if residual else 0)


def test_a_value_read_at_every_pixel_keeps_its_convs_as_they_are(folded, rng):
    w1, w2 = (tf.constant(rng.standard_normal((k, k, 8, 8)).astype(np.float32) / 5) for k in (3, 1))

    def model(x):
        r = tf.nn.relu(tf.nn.conv2d(x, w1, 1, "SAME"))
        return tf.nn.conv2d(r, w2, 2, "VALID"), r  # r itself is a result

    mod = check(model, 8, folded)
    assert sorted(convs(mod)) == [(1, (2, 2)), (3, (1, 1))]


def test_a_swish_between_takes_the_stride_through_both_of_its_reads(folded, rng):
    w1, w2 = (tf.constant(rng.standard_normal((k, k, 8, 8)).astype(np.float32) / 5) for k in (3, 1))

    def model(x):
        t = tf.nn.conv2d(x, w1, 1, "SAME")
        return tf.nn.conv2d(t * tf.sigmoid(t), w2, 2, "VALID")

    mod = check(model, 8, folded)
    assert sorted(convs(mod)) == [(1, (1, 1)), (3, (2, 2))]
    assert op_count(mod, "relax.strided_slice") == 0


def test_bf16_products_of_a_folded_block(folded, rng):
    """precision="bf16" folds the strides before its products go to bf16 kernels."""
    check(transition(rng, 3, "SAME", 1, 2, True), 8, folded, tol=2e-2, precision="bf16")
    assert any(sorted(convs(mod)) == [(1, (1, 1))] * 3 + [(3, (2, 2))] for mod in folded)
