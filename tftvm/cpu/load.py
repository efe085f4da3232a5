"""How busy the machine's other processes kept its cores while something ran.

A timing taken while another process competed for the cores says little about the quiet
machine, and TVM's kernels and TF's suffer from a neighbour unequally: the safety net marks
such a timing, and measures it again later (graph/offload/safety_net.py). The others' share
is the CPU time that Linux counts as busy on every core (the hypervisor's steal included)
less this process's own, over the wall time and the cores.
"""
from __future__ import annotations

import os
import time

_STAT = "/proc/stat"
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user, nice, system, irq, softirq, steal (not idle, iowait)


def others_share(run):
    """(run(), the share of all cores, 0 to 1, that other processes used meanwhile); the
    share is 0.0 where /proc/stat cannot be read (not Linux)."""
    busy, own, start = _busy_seconds(), time.process_time(), time.perf_counter()
    result = run()
    wall = time.perf_counter() - start
    if busy is None or wall <= 0:
        return result, 0.0
    after = _busy_seconds()
    if after is None:
        return result, 0.0
    others = (after - busy) - (time.process_time() - own)
    return result, min(1.0, max(0.0, others / (wall * (os.cpu_count() or 1))))


def _busy_seconds() -> float | None:
    """Seconds all cores have been busy since boot, or None where /proc/stat is unreadable."""
    try:
        with open(_STAT) as stat:
            fields = stat.readline().split()[1:]
        ticks = sum(int(fields[i]) for i in _BUSY_FIELDS if i < len(fields))
    except (OSError, ValueError, IndexError):
        return None
    return ticks / os.sysconf("SC_CLK_TCK")
