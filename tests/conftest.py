import contextlib
import fcntl
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# One private cache per test session unless the caller chose one (CI does).
os.environ.setdefault("TFTVM_CACHE_DIR", tempfile.mkdtemp(prefix="tftvm-test-cache-"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The safety net would keep tiny test clusters in TF wherever TF is faster, and the tests
# would then check TF against TF: it is off here, and on in tests/test_keep_faster.py.
os.environ.setdefault("TFTVM_KEEP_FASTER", "0")

import numpy as np  # noqa: E402
import pytest  # noqa: E402


def run_python(code: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (a crash there fails a test, not the runner);
    `env` entries of None are removed from its environment."""
    full_env = {k: v for k, v in dict(os.environ, **(env or {})).items() if v is not None}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full_env, timeout=timeout)  # fmt: skip


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def make_add_bias(width: int = 64, name: str = "add_bias", grad=None):
    """The op from the issue: C = A + B (row-broadcast) and D = row sums of C."""
    import tftvm
    from tvm import te

    n = te.var("n")
    A = te.placeholder((n, width), "float32", name="A")
    B = te.placeholder((width,), "float32", name="B")
    C = te.compute((n, width), lambda i, j: A[i, j] + B[j], name="C")
    k = te.reduce_axis((0, width), "k")
    D = te.compute((n,), lambda i: te.sum(C[i, k], axis=k), name="D")
    return tftvm.op([A, B], [C, D], name=name, grad=grad)


@pytest.fixture(scope="session")
def add_bias():
    return make_add_bias()


def make_matmul(name: str = "matmul", grad=None):
    """A (n, k) x B (k, m): the symbolic k is shared by two inputs."""
    import tftvm
    from tvm import te

    n, k, m = te.var("n"), te.var("k"), te.var("m")
    A = te.placeholder((n, k), "float32", name="A")
    B = te.placeholder((k, m), "float32", name="B")
    r = te.reduce_axis((0, k), "r")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return tftvm.op([A, B], [C], name=name, grad=grad)


@pytest.fixture(scope="session")
def matmul():
    return make_matmul()


ROOT = Path(__file__).resolve().parent.parent


def tf_graph(fn, specs):
    """The graph of `fn` traced on `specs` (tf.TensorSpec, None dims allowed), ready for to_relax:
    (nodes, inputs, outputs, op types)."""
    import tensorflow as tf

    concrete = tf.function(fn).get_concrete_function(*specs)
    graph_def = concrete.graph.as_graph_def()
    placeholders = [n for n in graph_def.node if n.op == "Placeholder"]
    nodes = [n for n in graph_def.node if n.op != "Placeholder"]
    inputs = [(p.name, s.dtype.name, s.shape.as_list()) for p, s in zip(placeholders, specs)]
    return nodes, inputs, [t.name for t in concrete.outputs], {n.op for n in nodes}


def check_converter(fn, specs, feeds, op_type: str, rtol=2e-5, atol=2e-5):
    """Convert `fn` traced on `specs` to Relax, compile it once, and compare it with TF on each
    feed (a list of arrays per call: several feeds exercise the None dims)."""
    import tensorflow as tf

    from tftvm.graph.frontend import to_relax
    from tftvm.graph.lowering.program import RelaxProgram

    nodes, inputs, outputs, op_types = tf_graph(fn, specs)
    assert op_type in op_types, f"the case does not emit {op_type}: {sorted(op_types)}"
    program = RelaxProgram(to_relax(nodes, inputs, outputs), name=f"convert_{op_type}")
    for feed in feeds:
        args = [tf.constant(a) for a in feed]
        got, want = program(*args), fn(*args)
        got, want = (list(got), list(want)) if isinstance(want, (list, tuple)) else ([got], [want])
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=rtol, atol=atol)
    return program


# Every op a test calls eagerly is also put through tftvm.check (tf.function, the shape
# function, jit_compile, a SavedModel reload, its gradient) with the inputs of its first
# call, once per kernel, after the test. `@pytest.mark.no_op_check` opts a test out, for ops
# that are wrong on purpose or whose module the test takes away.
_checked_kernels: set = set()


@pytest.fixture(autouse=True)
def _check_every_called_op(request):
    import tensorflow as tf

    import tftvm
    from tftvm.op import TvmOp

    if request.node.get_closest_marker("no_op_check"):
        yield
        return
    called, original = {}, TvmOp.__call__

    def recording(self, *args):
        outputs = original(self, *args)
        if tf.executing_eagerly() and (self.kernel.key, self.name) not in _checked_kernels:
            called.setdefault((self.kernel.key, self.name), (self, [np.asarray(a) for a in args]))
        return outputs

    TvmOp.__call__ = recording
    try:
        yield
    finally:
        TvmOp.__call__ = original
    for key, (op, inputs) in called.items():
        _checked_kernels.add(key)
        tftvm.check(op, *inputs)


def pytest_terminal_summary(terminalreporter):
    if _checked_kernels:
        terminalreporter.write_line(f"tftvm.check ran on {len(_checked_kernels)} ops the tests called")


# The suite runs on two pytest-xdist workers (pyproject's addopts). A test marked `serial`
# measures the machine (a neighbour's CPU share, a timing that decides): it runs while the
# other worker waits, through a readers-writer lock on files that all workers of one run share.
# The turnstile gives a waiting serial test priority: no new test starts until it has run.
@contextlib.contextmanager
def _flock(path: Path, mode: int):
    with open(path, "a") as f:
        fcntl.flock(f, mode)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:  # a single process: nothing runs beside the test
        yield
        return
    lock = Path(tempfile.gettempdir()) / f"tftvm-tests-{run}"
    serial = item.get_closest_marker("serial") is not None
    with contextlib.ExitStack() as held:
        with _flock(lock.with_suffix(".turnstile"), fcntl.LOCK_EX):
            held.enter_context(_flock(lock.with_suffix(".lock"), fcntl.LOCK_EX if serial else fcntl.LOCK_SH))
        yield
