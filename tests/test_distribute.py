"""tf.distribute: a training step with a tftvm op under MirroredStrategy on two CPUs."""
from conftest import run_python

MIRRORED = """
import numpy as np, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import tftvm
from tvm import te

n, k = te.var("n"), 4
x = te.placeholder((n, k), "float32", name="x")
w = te.placeholder((k,), "float32", name="w")
r = te.reduce_axis((0, k), "r")
y = te.compute((n,), lambda i: te.sum(x[i, r] * w[r], axis=r), name="y")
dx = lambda x, w, y, dy: (dy[:, None] * w[None, :], tf.reduce_sum(dy[:, None] * x, axis=0))
matvec = tftvm.op([x, w], [y], name="matvec", grad=dx)

data = np.arange(32, dtype=np.float32).reshape(8, 4) / 10.0
target = np.ones(8, np.float32)

def run(strategy):
    with strategy.scope():
        v = tf.Variable(np.array([0.1, -0.2, 0.3, 0.05], np.float32))
        opt = tf.keras.optimizers.SGD(0.01)

    @tf.function
    def step(xb, yb):
        def replica(xb, yb):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum((matvec(xb, v) - yb) ** 2) / 8.0
            g = tape.gradient(loss, v)
            opt.apply_gradients([(g, v)])
            return loss
        losses = strategy.run(replica, args=(xb, yb))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    ds = tf.data.Dataset.from_tensor_slices((data, target)).batch(8)
    ds = strategy.experimental_distribute_dataset(ds)
    losses = []
    for _ in range(3):
        for xb, yb in ds:
            losses.append(float(step(xb, yb)))
    return v.numpy(), losses

mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
assert mirrored.num_replicas_in_sync == 2
v2, l2 = run(mirrored)
v1, l1 = run(tf.distribute.get_strategy())
np.testing.assert_allclose(v2, v1, rtol=1e-5, atol=1e-6)
np.testing.assert_allclose(l2, l1, rtol=1e-5, atol=1e-6)
print("OK", l1)
"""


def test_mirrored_strategy_matches_single_device():
    proc = run_python(MIRRORED)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "OK" in proc.stdout
