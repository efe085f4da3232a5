"""Tuning wall time with candidates measured on 1 vs 2 local TVM RPC servers.

    python benchmarks/rpc_tune.py [--trials N] [--servers 0,1,2] [--size S] [--markdown FILE]

Starts a tracker and the servers on 127.0.0.1 (TVM's own tvm.rpc classes), then tunes the
same kernel (an S x S x S float32 matmul) with the same trial count and seed for each server
count (0: MetaSchedule's local runner, no RPC), each into a fresh database, and prints the tuning wall time, the best latency the
records hold, and the time as a ratio to the first row. Candidates are built here in
parallel; with 2 servers two are measured at once. On a 2-core machine the servers share
the cores with the builders: expect overlap of building and measuring, not 2x.
"""
from __future__ import annotations

import argparse
import json
import logging
import platform
import socket
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def best_ms(database: Path) -> float:
    """The fastest mean run time among the database's records, in ms."""
    best = float("inf")
    for line in (database / "database_tuning_record.json").read_text().splitlines():
        run_secs = json.loads(line)[1][1]
        if run_secs:
            best = min(best, sum(float(s) for s in run_secs) / len(run_secs))
    return best * 1e3


def tune_once(servers: int, trials: int, size: int) -> tuple[float, float]:
    import tftvm
    from tvm import rpc, te
    from tvm.rpc.tracker import Tracker

    port = free_port()
    tracker = Tracker(host="127.0.0.1", port=port, port_end=port + 1, silent=True)
    started = []
    try:
        for _ in range(servers):
            p = free_port()
            started.append(rpc.Server(host="127.0.0.1", port=p, port_end=p + 1, key="bench",
                                      tracker_addr=("127.0.0.1", tracker.port), silent=True))  # fmt: skip
        spec = f"127.0.0.1:{tracker.port}:bench"
        deadline = time.monotonic() + 60
        while True:
            try:
                if not servers or tftvm.rpc_runner.parse(spec).servers() == servers:
                    break
            except tftvm.rpc_runner.RPCUnavailableError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{servers} servers did not register with the tracker in 60 s")
            time.sleep(0.5)
        A = te.placeholder((size, size), "float32", name="A")
        B = te.placeholder((size, size), "float32", name="B")
        k = te.reduce_axis((0, size), "k")
        C = te.compute((size, size), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        op = tftvm.op([A, B], [C], name=f"matmul{size}")
        database = Path(tempfile.mkdtemp(prefix="tftvm-rpc-bench-"))
        start = time.perf_counter()
        tftvm.tune(op, trials=trials, database=database, seed=0, rpc=spec if servers else None)
        return time.perf_counter() - start, best_ms(database)
    finally:
        for server in started:
            server.terminate()
        tracker.terminate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--servers", default="0,1,2", help="comma-separated server counts (0: local runner)")
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--markdown", help="also write the table to this file")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    import os

    rows = []
    for servers in [int(s) for s in args.servers.split(",")]:
        seconds, best = tune_once(servers, args.trials, args.size)
        rows.append((servers, seconds, best))
    header = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; matmul {args.size}^3 float32, {args.trials} trials, seed 0"
    lines = [header, "", "| RPC servers | tuning wall s | vs first row | best record ms |", "|---|---|---|---|"]
    lines += [f"| {n or 'none (local runner)'} | {s:.1f} | {s / rows[0][1]:.2f} | {b:.4g} |" for n, s, b in rows]
    print("\n".join(lines))
    if args.markdown:
        Path(args.markdown).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
