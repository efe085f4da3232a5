"""A Keras 3 model whose dense kernel is a tftvm matmul trains like tf.matmul."""
import functools
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf
from tftvm import native

from conftest import make_matmul, run_python


@pytest.fixture(scope="module")
def matmul_with_grad():
    return trainable_matmul()


@functools.lru_cache(maxsize=None)
def trainable_matmul():
    """A TE matmul whose backward TVM derives itself (grad="auto")."""
    return make_matmul(name="matmul_trainable", grad="auto")


class Dense(keras.layers.Layer):
    def __init__(self, units, matmul, **kwargs):
        super().__init__(**kwargs)
        self.units, self.matmul = units, matmul

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units), initializer="glorot_uniform")
        self.bias = self.add_weight(shape=(self.units,), initializer="zeros")

    def call(self, x):
        return self.matmul(x, self.kernel) + self.bias


def train(matmul, x, y):
    keras.utils.set_random_seed(7)
    model = keras.Sequential([keras.Input((x.shape[1],)), Dense(16, matmul), keras.layers.ReLU(),
                              Dense(1, matmul)])  # fmt: skip
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    history = model.fit(x, y, batch_size=16, epochs=6, shuffle=False, verbose=0)
    return history.history["loss"]


def test_fit_matches_tf_matmul(matmul_with_grad):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 8)).astype(np.float32)
    y = (x @ rng.standard_normal((8, 1)) + 0.1).astype(np.float32)
    want = train(tf.matmul, x, y)
    got = train(matmul_with_grad, x, y)
    assert want[-1] < want[0]  # the reference model does learn
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@keras.saving.register_keras_serializable("tftvm_tests")
class TvmDense(Dense):
    """The documented pattern: the layer builds its op itself, so its config is plain data."""

    def __init__(self, units, **kwargs):
        super().__init__(units, trainable_matmul(), **kwargs)

    def get_config(self):
        return {**super().get_config(), "units": self.units}


SERVE = """
import numpy as np, tensorflow as tf, tftvm
m = tf.saved_model.load({path!r})
np.save({out!r}, m.serve(tf.constant(np.load({x!r}))).numpy())
"""


def test_keras_save_load_and_export(tmp_path):
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((8,)), TvmDense(4), keras.layers.ReLU(), TvmDense(2)])
    x = np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32)
    want = model(x).numpy()
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    np.testing.assert_array_equal(loaded(x).numpy(), want)

    model.export(str(tmp_path / "exported"), verbose=False)
    np.save(tmp_path / "x.npy", x)
    fresh = tmp_path / "cache"
    shutil.copytree(native.library_path().parent, fresh / "native" / native.build_dir().name)
    proc = run_python(SERVE.format(path=str(tmp_path / "exported"), out=str(tmp_path / "y.npy"),
                                   x=str(tmp_path / "x.npy")), env={"TFTVM_CACHE_DIR": str(fresh)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), want)


def test_auto_grad_matmul_matches_numeric_gradient():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 2)).astype(np.float32)
    theoretical, numerical = tf.test.compute_gradient(trainable_matmul(), [a, b])
    for t, n in zip(theoretical, numerical):
        np.testing.assert_allclose(t, n, rtol=1e-2, atol=1e-2)  # float32 finite differences
