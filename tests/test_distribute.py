"""tf.distribute: a training step with a tftvm op under MirroredStrategy on two CPUs."""
from conftest import run_python

# A TE mat-vec with its backward, defined the same way in every worker script.
MATVEC = """
n, k = te.var("n"), 4
x = te.placeholder((n, k), "float32", name="x")
w = te.placeholder((k,), "float32", name="w")
r = te.reduce_axis((0, k), "r")
y = te.compute((n,), lambda i: te.sum(x[i, r] * w[r], axis=r), name="y")
grad = lambda x, w, y, dy: (dy[:, None] * w[None, :], tf.reduce_sum(dy[:, None] * x, axis=0))
matvec = tftvm.op([x, w], [y], name="matvec", grad=grad)
"""

MIRRORED = """
import numpy as np, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import tftvm
from tvm import te

""" + MATVEC + """

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


WORKER = """
import json, os, sys
import numpy as np, tensorflow as tf
import tftvm
from tvm import te

strategy = tf.distribute.MultiWorkerMirroredStrategy()
""" + MATVEC + """

task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
rng = np.random.default_rng(task)            # each worker has its own shard
data = rng.standard_normal((4, 4)).astype(np.float32)
with strategy.scope():
    v = tf.Variable(np.array([0.1, -0.2, 0.3, 0.05], np.float32))
    opt = tf.keras.optimizers.SGD(0.05)

@tf.function
def step():
    def replica():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((matvec(tf.constant(data), v) - 1.0) ** 2)
        opt.apply_gradients([(tape.gradient(loss, v), v)])
        return loss
    return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica), axis=None)

losses = [float(step()) for _ in range(3)]
print("RESULT", json.dumps({"v": v.numpy().tolist(), "losses": losses}))
"""


def _free_ports(count):
    import socket

    socks = [socket.socket() for _ in range(count)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def test_multi_worker_mirrored_strategy_on_localhost():
    import json
    import os
    import subprocess
    import sys

    import numpy as np

    workers = [f"127.0.0.1:{p}" for p in _free_ports(2)]
    procs = []
    for index in range(2):
        config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = dict(os.environ, TF_CONFIG=json.dumps(config))
        procs.append(subprocess.Popen([sys.executable, "-c", WORKER], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))  # fmt: skip
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=240)
            assert p.returncode == 0, err[-4000:]
            results.append(json.loads(out.split("RESULT", 1)[1]))
    finally:
        for p in procs:
            p.kill()
    # Both workers end with the same variable: the all-reduced gradients of both shards.
    np.testing.assert_allclose(results[0]["v"], results[1]["v"], rtol=1e-6)
    np.testing.assert_allclose(results[0]["losses"], results[1]["losses"], rtol=1e-6)
    # And it is the variable a single process gets from both shards' summed gradient.
    shards = [np.random.default_rng(i).standard_normal((4, 4)).astype(np.float32) for i in range(2)]
    v = np.array([0.1, -0.2, 0.3, 0.05], np.float32)
    for _ in range(3):
        g = sum(2 * ((d @ v - 1.0)[:, None] * d).sum(0) for d in shards)
        v = v - 0.05 * g
    np.testing.assert_allclose(results[0]["v"], v, rtol=1e-4, atol=1e-6)
