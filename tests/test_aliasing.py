"""Memory handed between the Relax VM and TF never aliases what either side reuses.

The VM's memory planner takes what a call into TF returns as new memory and reuses an
argument's storage once the argument is dead. TF ops that forward their input's buffer
(Identity, IdentityN, Reshape, ...) or return a view of it (Split, Unpack, a StridedSlice
along the first axis) would hand the VM memory it is about to overwrite: EfficientNet's
swish (IdentityN) made compile_model return wrong numbers that way.
"""
import numpy as np
import pytest
import tensorflow as tf
import tftvm
from tftvm.compiled_model import unaliased

RNG = np.random.default_rng(7)
W = [tf.constant(RNG.standard_normal((3, 3, 8, 8)).astype(np.float32) / 8) for _ in range(4)]


def _swish_block(x, forward):
    """conv -> swish -> a forwarding TF op, as Keras' swish emits it (IdentityN)."""
    h = tf.nn.conv2d(x, W[0], 1, "SAME")
    h = forward(h * tf.sigmoid(h))
    g = tf.nn.conv2d(h, W[1], 1, "SAME")  # new buffers of h's size, planned after h is dead
    g = g * tf.sigmoid(g)
    g = tf.nn.conv2d(g, W[2], 1, "SAME")
    return tf.nn.conv2d(g + h, W[3], 1, "SAME") + h


FORWARDING = {  # TF op type -> a use of it that hands back its input's memory
    "IdentityN": lambda t: tf.raw_ops.IdentityN(input=[t, t])[1],
    "Identity": tf.identity,
    "Reshape": lambda t: tf.reshape(tf.reshape(t, [-1]), tf.shape(t)),
    "ExpandDims": lambda t: tf.expand_dims(t, 0)[0],
    "Split": lambda t: tf.concat(tf.split(t, 2, axis=0), axis=0),
    "Unpack": lambda t: tf.stack(tf.unstack(t, axis=0)),
    "StridedSlice": lambda t: tf.concat([t[:1], t[1:]], axis=0),
}


@pytest.mark.parametrize("op_type", sorted(FORWARDING))
def test_a_tf_op_that_forwards_its_input_never_hands_the_vm_reused_memory(op_type):
    fn = tf.function(lambda x: _swish_block(x, FORWARDING[op_type]))
    exe = tftvm.compile_model(fn, [tf.TensorSpec([2, 12, 12, 8])], deny={op_type})
    assert op_type in {fb.op for fb in exe.fallbacks}
    for seed in range(3):  # the plan is the same each call: every call must be right
        x = np.random.default_rng(seed).standard_normal((2, 12, 12, 8)).astype(np.float32)
        np.testing.assert_allclose(exe(x), fn(x), rtol=1e-4, atol=1e-4)


def test_tf_never_writes_into_the_vm_tensors_it_is_given():
    # Neg and Relu may reuse their input's buffer in TF when nothing else holds it; here
    # the VM still needs that input after the TF op ran.
    def fn(x):
        h = tf.nn.conv2d(x, W[0], 1, "SAME") + 1.0
        return tf.nn.relu(tf.negative(h)) * 3.0 + tf.nn.conv2d(h, W[1], 1, "SAME")

    fn = tf.function(fn)
    exe = tftvm.compile_model(fn, [tf.TensorSpec([1, 8, 8, 8])], deny={"Neg", "Relu"})
    assert {fb.op for fb in exe.fallbacks} == {"Neg", "Relu"}
    x = RNG.standard_normal((1, 8, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(exe(x), fn(x), rtol=1e-4, atol=1e-4)


def _tvm(array):
    import tvm

    return tvm.runtime.tensor(array)


def test_unaliased_copies_exactly_the_outputs_that_overlap():
    import tvm

    base = _tvm(np.arange(64 * 64, dtype=np.float32).reshape(64, 64))
    view = tvm.runtime.from_dlpack(tf.experimental.dlpack.to_dlpack(
        tf.experimental.dlpack.from_dlpack(base.__dlpack__())))  # same memory, another owner
    other = _tvm(np.ones((4,), np.float32))
    out = unaliased([view, other, other], [base])
    assert out[0].data_ptr() != base.data_ptr()  # overlapped an input: copied
    np.testing.assert_array_equal(out[0].numpy(), base.numpy())
    assert out[1] is other  # touches no input: handed over as is
    assert out[2].data_ptr() != other.data_ptr()  # the same buffer twice: the second is copied
    np.testing.assert_array_equal(out[2].numpy(), other.numpy())
