"""Tuning with candidates measured on TVM RPC servers: a tracker and servers on 127.0.0.1."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tftvm
from tftvm import rpc_runner
from tvm import te

KEY = "tftvm-test"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A tracker and its servers, each a process group of its own (servers fork per session),
    logging to files; everything is killed when the test ends."""

    def __init__(self, tmp_path):
        self.tmp_path, self.procs, self.logs = tmp_path, {}, {}
        self.taken: set[int] = set()  # ports handed out: the OS may give a closed one again before its owner binds
        self.port = self._port()
        self._start("tracker", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(self.port),
                    "--port-end", str(self.port + 1))  # fmt: skip
        self.spec = f"127.0.0.1:{self.port}:{KEY}"

    def _start(self, name, module, *args):
        self.logs[name] = self.tmp_path / f"{name}.log"
        with open(self.logs[name], "w") as log:
            self.procs[name] = subprocess.Popen([sys.executable, "-m", module, *args], stdout=log,
                                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip

    def _port(self) -> int:
        """A free port that, with the one after it, no process of this cluster was given."""
        while (port := free_port()) in self.taken or port + 1 in self.taken:
            pass
        self.taken |= {port, port + 1}
        return port

    def add_server(self, name, key=KEY):
        port = self._port()
        self._start(name, "tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", str(port), "--port-end",
                    str(port + 1), "--tracker", f"127.0.0.1:{self.port}", "--key", key)  # fmt: skip

    def wait_for(self, servers: int, key: str = KEY, timeout: float = 60):
        deadline = time.monotonic() + timeout
        while True:
            try:
                if rpc_runner.parse(f"127.0.0.1:{self.port}:{key}").servers() == servers:
                    return
            except rpc_runner.RPCUnavailableError:
                pass
            assert time.monotonic() < deadline, {n: p.read_text()[-2000:] for n, p in self.logs.items()}
            time.sleep(0.5)

    def kill(self, name):
        os.killpg(self.procs[name].pid, signal.SIGKILL)
        self.procs[name].wait(timeout=30)

    def measured(self, name) -> int:
        """Candidates a server ran: its log has a line for each module it loaded."""
        return self.logs[name].read_text().count("load_module")

    def close(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.close()


def matmul_op(name):
    A = te.placeholder((32, 32), "float32", name="A")
    B = te.placeholder((32, 32), "float32", name="B")
    k = te.reduce_axis((0, 32), "k")
    C = te.compute((32, 32), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return tftvm.op([A, B], [C], name=name)


def assert_correct(op):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 32, 32)).astype(np.float32)
    np.testing.assert_allclose(op(a, b).numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_two_servers_share_the_measuring_and_the_tuned_op_is_right(cluster, tmp_path):
    cluster.add_server("server1")
    cluster.add_server("server2")
    cluster.wait_for(servers=2)
    tuned = tftvm.tune(matmul_op("matmul_rpc"), trials=16, database=tmp_path / "db", seed=0, rpc=cluster.spec)
    assert cluster.measured("server1") > 0 and cluster.measured("server2") > 0, (
        cluster.measured("server1"), cluster.measured("server2"))  # fmt: skip
    assert (tmp_path / "db" / "database_tuning_record.json").read_text().strip()
    assert_correct(tuned)
    # The best records were checked on a server too (the default schedule, then the best record).
    assert sum(cluster.logs[s].read_text().count("tftvm_check_") for s in ("server1", "server2")) >= 2


def test_a_wrong_record_is_dropped_by_a_check_on_a_server(cluster, tmp_path, rng):
    from test_tune import assert_only_the_right_record_is_left, database_with_a_wrong_record
    from tftvm.records import drop_wrong_records

    cluster.add_server("server1")
    cluster.wait_for(servers=1)
    untuned, mod, target = database_with_a_wrong_record(tmp_path)
    tracker = rpc_runner.parse(cluster.spec)
    assert drop_wrong_records({"norm_mm": untuned.prim_func}, target, tmp_path, tracker=tracker) == 1
    assert cluster.logs["server1"].read_text().count("tftvm_check_") == 3  # default, wrong, right
    assert_only_the_right_record_is_left(tmp_path, mod, rng)
    # With the server gone the check fails clearly, and drops no record for it.
    database_with_a_wrong_record(tmp_path / "again")
    cluster.kill("server1")
    with pytest.raises(rpc_runner.RPCUnavailableError, match="no server under key"):
        drop_wrong_records({"norm_mm": untuned.prim_func}, target, tmp_path / "again", tracker=tracker)
    assert len((tmp_path / "again" / "database_tuning_record.json").read_text().splitlines()) == 2


def test_a_server_killed_while_tuning_leaves_the_other_to_finish(cluster, tmp_path, monkeypatch):
    cluster.add_server("server1")
    cluster.add_server("server2")
    cluster.wait_for(servers=2)
    killed_at = []

    def kill_after_the_first_batch(p):
        if not killed_at:
            killed_at.append(cluster.measured("server1"))
            cluster.kill("server2")

    monkeypatch.setenv("TFTVM_RPC", cluster.spec)  # the environment variable names the tracker
    tuned = tftvm.tune(matmul_op("matmul_rpc_fault"), trials=16, database=tmp_path / "db", seed=0,
                       progress=kill_after_the_first_batch)  # fmt: skip
    assert killed_at and cluster.measured("server1") > killed_at[0]  # the survivor measured what followed
    assert_correct(tuned)


def test_no_server_under_the_key_or_no_tracker_is_a_clear_error(cluster, tmp_path):
    cluster.add_server("other", key="another-key")
    cluster.wait_for(servers=1, key="another-key")
    with pytest.raises(rpc_runner.RPCUnavailableError, match=f"no server under key '{KEY}' \\(keys there: another-key\\)"):
        tftvm.tune(matmul_op("matmul_rpc_nokey"), trials=4, database=tmp_path / "db", rpc=cluster.spec)
    cluster.kill("tracker")
    with pytest.raises(rpc_runner.RPCUnavailableError, match=f"cannot reach the RPC tracker at 127.0.0.1:{cluster.port}"):
        tftvm.tune(matmul_op("matmul_rpc_nokey"), trials=4, database=tmp_path / "db", rpc=cluster.spec)


@pytest.mark.parametrize("spec", ["localhost", "localhost:9190", "host:port:key", ":9190:key", "h:1:"])
def test_a_malformed_rpc_spec_is_a_value_error(spec):
    with pytest.raises(ValueError, match="rpc must be 'HOST:PORT:KEY'"):
        rpc_runner.parse(spec)


def test_the_tracker_gone_mid_run_stops_the_search_and_keeps_what_was_measured(cluster, tmp_path):
    cluster.add_server("server1")
    cluster.wait_for(servers=1)

    def kill_everything_after_the_first_batch(p):
        if cluster.procs["tracker"].poll() is None:
            cluster.kill("tracker")
            cluster.kill("server1")

    start = time.monotonic()
    with pytest.raises(rpc_runner.RPCUnavailableError, match="cannot reach the RPC tracker"):
        tftvm.tune(matmul_op("matmul_rpc_gone"), trials=16, database=tmp_path / "db", seed=0, rpc=cluster.spec,
                   progress=kill_everything_after_the_first_batch)  # fmt: skip
    assert time.monotonic() - start < 120  # failed candidates fail fast: no wait on TVM's retries
    lines = (tmp_path / "db" / "database_tuning_record.json").read_text().splitlines()
    run_secs = [json.loads(line)[1][1] for line in lines]  # failed candidates are kept at 1e10 s
    assert any(secs and max(float(s) for s in secs) < 1.0 for secs in run_secs), run_secs  # the first batch's
