"""TF tensors and TVM tensors as each other, sharing memory (DLPack) where they can."""
from __future__ import annotations


def to_tf(t):
    """A TVM tensor as a TF tensor, sharing its memory."""
    import tensorflow as tf

    return tf.experimental.dlpack.from_dlpack(t.__dlpack__())


def to_tvm(t):
    """A TF tensor as a TVM tensor, sharing its memory unless TVM's alignment needs a copy."""
    import tensorflow as tf
    import tvm

    try:
        return tvm.runtime.from_dlpack(tf.experimental.dlpack.to_dlpack(t))
    except (ValueError, RuntimeError):  # TVM's errors are these types
        return tvm.runtime.tensor(t.numpy())
