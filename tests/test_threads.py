"""Many threads at once; parallel loops on TF's intra-op pool, sized by TF's intra-op setting."""
import concurrent.futures

import numpy as np
import tensorflow as tf

from conftest import run_python


def test_thread_pool_calls_are_correct(add_bias, matmul):
    @tf.function(input_signature=[tf.TensorSpec([None, 64]), tf.TensorSpec([64])])
    def graph_add_bias(x, b):
        return add_bias(x, b)

    def work(i):
        rng = np.random.default_rng(i)
        n = 1 + i % 17
        x = rng.standard_normal((n, 64), dtype=np.float32)
        b = rng.standard_normal(64, dtype=np.float32)
        call = add_bias if i % 2 else graph_add_bias
        y, s = call(x, b)
        np.testing.assert_allclose(s.numpy(), (x + b).sum(1), rtol=1e-5, atol=1e-4)
        a, c = rng.standard_normal((n, 5), dtype=np.float32), rng.standard_normal((5, 3), dtype=np.float32)
        np.testing.assert_allclose(matmul(a, c).numpy(), a @ c, rtol=1e-5, atol=1e-5)
        return i

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        assert sorted(pool.map(work, range(200))) == list(range(200))


TVM_THREADS = """
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads({intra})
import numpy as np, tftvm, tvm_ffi
from tvm import te
n = te.var("n")
A = te.placeholder((n, 256), "float32", name="A")
B = te.placeholder((256, 256), "float32", name="B")
k = te.reduce_axis((0, 256), "k")
op = tftvm.op([A, B], [te.compute((n, 256), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")], name="mm")
a, b = np.ones((512, 256), np.float32), np.ones((256, 256), np.float32)
assert (op(a, b).numpy() == 256).all()
assert (tf.function(op)(a, b).numpy() == 256).all()
print("THREADS", tvm_ffi.get_global_func("tftvm.max_tvm_threads")(), tvm_ffi.get_global_func("tftvm.max_loop_threads")())
"""


def test_parallel_loops_follow_tf_intra_op_setting():
    """A kernel's parallel loop runs on as many threads as TF's intra-op pool has (TF's pool,
    or TVM's sized to it for a library that TF's pool cannot run)."""
    for intra in (1, 2):
        proc = run_python(TVM_THREADS.format(intra=intra), env={"TVM_NUM_THREADS": "4"})
        assert proc.returncode == 0, proc.stderr[-3000:]
        tvm_pool, tf_pool = (int(t) for t in proc.stdout.split("THREADS")[1].split())
        assert (tvm_pool, tf_pool) == (intra, intra)


def test_parallel_loops_agree_on_tf_and_tvm_pools(rng):
    """The same kernels give the same results with their loops on TF's pool (split into more
    tasks than threads) and on TVM's, called from many threads at once."""
    import tvm_ffi
    from tvm import te

    import tftvm
    import tftvm.native

    n = te.var("n")
    A = te.placeholder((n, 256), "float32", name="A")
    B = te.placeholder((256, 256), "float32", name="B")
    k = te.reduce_axis((0, 256), "k")
    C = te.compute((n, 256), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    matmul = tftvm.op([A, B], [C], name="pools_matmul")  # static k and m: a parallel loop
    a = rng.standard_normal((300, 256), dtype=np.float32)
    b = rng.standard_normal((256, 256), dtype=np.float32)
    graph = tf.function(matmul)

    def work(i):
        return graph(a[: 1 + i * 7], b).numpy() if i % 2 else matmul(a[: 1 + i * 7], b).numpy()

    results = {}
    try:
        for tf_pool in (True, False):
            tftvm.native.use_tf_threads(tf_pool)
            with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
                results[tf_pool] = list(pool.map(work, range(40)))
    finally:
        tftvm.native.use_tf_threads(True)
    assert tvm_ffi.get_global_func("tftvm.max_loop_threads")() >= 1  # TF's pool did run loops
    for i, (on_tf, on_tvm) in enumerate(zip(results[True], results[False])):
        np.testing.assert_allclose(on_tf, a[: 1 + i * 7] @ b, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(on_tf, on_tvm)


SPIN = """
import time, numpy as np, tftvm
from tvm import te
n = te.var("n")
A = te.placeholder((n,), "float32", name="A")
op = tftvm.op([A], [te.compute((n,), lambda i: A[i] + 1.0, name="B")], name="inc")
x = np.zeros(1 << 22, np.float32)
op(x), op(x)
start = time.process_time()
time.sleep(0.3)
print("IDLE_CPU_MS", (time.process_time() - start) * 1e3)
"""


def test_tvm_workers_sleep_soon_after_a_call():
    """TVM's default has each worker yield 300000 times after a job (182 ms of CPU measured
    in the 0.3 s after a call), taking the cores from whatever TF runs next; tftvm's default
    spin count lets them sleep (0.6 ms)."""
    proc = run_python(SPIN, env={"TVM_THREAD_POOL_SPIN_COUNT": None})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert float(proc.stdout.split("IDLE_CPU_MS")[1]) < 50


VM_LOOPS = """
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(2)
import tempfile, numpy as np, keras, tftvm, tvm_ffi
loops = tvm_ffi.get_global_func("tftvm.loops_launched")
tftvm.native.use_tf_threads({shared})
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((16, 16, 8)), keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
                          keras.layers.Conv2D(64, 1)])
compiled = tftvm.compile_model(model, [tf.TensorSpec([None, 16, 16, 8])], keep_faster=False)
x = np.random.default_rng(0).standard_normal((4, 16, 16, 8)).astype(np.float32)
before = loops()
y = compiled(x).numpy()
after_vm = loops()
path = tempfile.mkdtemp()
compiled.export(path)
z = tftvm.load_model(path)(x).numpy()
np.save(path + "/y.npy", y); np.save(path + "/z.npy", z); np.save(path + "/want.npy", model(x).numpy())
print("LOOPS", after_vm - before, loops() - after_vm, "DIR", path)
"""


def test_compile_model_loops_on_the_shared_launcher():
    """compile_model's VM, compiled here or loaded from an export, runs its parallel loops on
    tftvm's launcher (vm_threads.py), and on TVM's pool after use_tf_threads(False); the
    results agree to the bit and with Keras."""
    results = {}
    for shared in (True, False):
        proc = run_python(VM_LOOPS.format(shared=shared))
        assert proc.returncode == 0, proc.stderr[-3000:]
        counts, path = proc.stdout.split("LOOPS")[1].split("DIR")
        compiled_loops, loaded_loops = (int(c) for c in counts.split())
        if shared:
            assert compiled_loops > 0 and loaded_loops > 0
        else:
            assert compiled_loops == loaded_loops == 0
        y, z, want = (np.load(f"{path.strip()}/{n}.npy") for n in ("y", "z", "want"))
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(y, z)
        results[shared] = y
    np.testing.assert_array_equal(results[True], results[False])
