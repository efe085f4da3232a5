"""Measuring tuning candidates on the servers of a TVM RPC tracker (`tftvm.tune(rpc=...)`).

TVM ships the distributed part: `python -m tvm.exec.rpc_tracker` and `python -m
tvm.exec.rpc_server --tracker HOST:PORT --key KEY` on each machine, and MetaSchedule's
RPCRunner, which asks the tracker for a free server under KEY per candidate. This module
only parses "HOST:PORT:KEY", asks the tracker how many servers it has under KEY (one
measurement in flight per server), and says clearly when there are none: a request for a
key without servers waits in the tracker's queue for ever.
"""
from __future__ import annotations

import dataclasses
import logging
import os

log = logging.getLogger(__name__)

RPC_ENV = "TFTVM_RPC"
# Seconds a candidate may take on a server, its upload and the wait for a free server included.
SESSION_TIMEOUT = 60
CHECK_SESSION_TIMEOUT = 600


class RPCUnavailableError(RuntimeError):
    """The tracker cannot be reached, or has no server under the key."""


@dataclasses.dataclass(frozen=True)
class Tracker:
    host: str
    port: int
    key: str

    def __str__(self) -> str:
        return f"{self.host}:{self.port}:{self.key}"

    def servers(self) -> int:
        """How many servers are registered under the key (free or busy); raises
        RPCUnavailableError where the tracker cannot be reached or none is."""
        try:
            keys = _server_keys(self.host, self.port)
        except Exception as err:  # OSError, or TVM's RuntimeError for something else at the port
            raise RPCUnavailableError(f"cannot reach the RPC tracker at {self.host}:{self.port}: {err}") from None
        count = keys.count(self.key)
        if count == 0:
            raise RPCUnavailableError(
                f"the RPC tracker at {self.host}:{self.port} has no server under key '{self.key}' "
                f"(keys there: {', '.join(sorted(set(keys))) or 'none'}); start one with: python -m "
                f"tvm.exec.rpc_server --tracker {self.host}:{self.port} --key {self.key}"
            )
        return count

    def runner(self):
        """MetaSchedule's RPCRunner on this tracker's servers under the key, one measurement
        in flight per server."""
        from tvm.s_tir import meta_schedule as ms

        servers = self.servers()
        log.info("measuring on %d RPC server(s) under key '%s' at %s:%d", servers, self.key, self.host, self.port)
        return ms.runner.RPCRunner(rpc_config=self._config(SESSION_TIMEOUT), f_create_session=_create_session,
                                   max_workers=servers)  # fmt: skip

    def session(self):
        """A session on one of the key's servers (the records' correctness check: one kernel's
        default schedule and records, built here while the session waits)."""
        self.servers()
        try:
            return _create_session(self._config(CHECK_SESSION_TIMEOUT))
        except Exception as err:  # TVM's RuntimeError: the server went, or the tracker did
            raise RPCUnavailableError(f"no session on a server under key '{self.key}' at {self.host}:{self.port}: "
                                      f"{last_line(err)}") from None

    def _config(self, timeout: int):
        from tvm.s_tir import meta_schedule as ms

        return ms.runner.RPCConfig(tracker_host=self.host, tracker_port=self.port, tracker_key=self.key,
                                   session_timeout_sec=timeout)  # fmt: skip


def last_line(err: Exception) -> str:
    """The last line of an error's message (TVM's carry a C++ traceback before it)."""
    text = str(err).strip()
    return text.splitlines()[-1] if text else repr(err)


def _session_functions():
    """`server_keys(host, port)`: the key of each server registered with the tracker; and
    `create_session(config)` for MetaSchedule's RPCRunner. Nested, so that cloudpickle sends
    them to MetaSchedule's worker processes by value: a worker does not import tftvm (and TF)."""

    def server_keys(host, port):
        import socket

        from tvm import rpc

        socket.create_connection((host, port), timeout=5).close()  # refused at once, not after TVM's retries
        tracker = rpc.connect_tracker(host, port)
        try:  # a server registers as "server:KEY"
            return [s.get("key", "").split(":", 1)[-1] for s in tracker.summary().get("server_info", [])]
        finally:
            tracker.close()

    def create_session(config):
        from tvm import rpc

        # TVM's own would retry a refused connection for minutes, and a request for a key
        # without servers waits in the tracker's queue for ever: fail the candidate instead.
        if config.tracker_key not in server_keys(config.tracker_host, config.tracker_port):
            raise RuntimeError(f"no RPC server left under key '{config.tracker_key}'")
        tracker = rpc.connect_tracker(config.tracker_host, config.tracker_port)
        return tracker.request(config.tracker_key, priority=config.session_priority,
                               session_timeout=config.session_timeout_sec, max_retry=1)  # fmt: skip

    return server_keys, create_session


_server_keys, _create_session = _session_functions()


def parse(spec: str | None) -> Tracker | None:
    """"HOST:PORT:KEY" (or $TFTVM_RPC where `spec` is None) as a Tracker; None for neither."""
    spec = spec if spec is not None else os.environ.get(RPC_ENV) or None
    if spec is None:
        return None
    parts = str(spec).rsplit(":", 2)
    if len(parts) != 3 or not all(parts) or not parts[1].isdigit():
        raise ValueError(f"rpc must be 'HOST:PORT:KEY' (the tracker and the servers' key), got {spec!r}")
    return Tracker(parts[0], int(parts[1]), parts[2])
