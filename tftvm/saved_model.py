"""Loading SavedModels that contain tftvm ops."""
from __future__ import annotations

import tensorflow as tf

from . import native


def load_saved_model(path, tags=None, options=None):
    """`tf.saved_model.load`, after registering the TvmCall op (raising if it cannot be).

    The TVM code travels inside the SavedModel: nothing is compiled here.
    """
    native.load()
    return tf.saved_model.load(str(path), tags=tags, options=options)
