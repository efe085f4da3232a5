"""Shared by the benchmark scripts: timing, the machine line, table printing and the ratio chart."""
from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import numpy as np


def median_ms(fn, *args, repeats: int = 50, warmup: int = 3) -> float:
    """Median wall time of `fn(*args)` in ms, each call synced by `.numpy()` on its outputs
    (numpy arrays, as other runtimes return, are on the host already)."""
    for _ in range(warmup):
        _sync(fn(*args))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        _sync(fn(*args))
        samples.append(time.perf_counter() - start)
    return 1e3 * float(np.median(samples))


def _sync(out) -> None:
    for t in out if isinstance(out, (tuple, list)) else [out]:
        if not isinstance(t, np.ndarray):
            t.numpy()


def machine() -> str:
    """CPU model, core count and versions: the first line of every results table."""
    import tensorflow as tf
    import tvm

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores; TF {tf.__version__}, TVM {tvm.__version__}"


CPU_FLAGS = ["avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_vnni", "amx_int8"]


def cpu_flags() -> list[str]:
    """The flags of CPU_FLAGS that /proc/cpuinfo lists (the vector and matrix units a
    compiler may use for f32, bf16 and int8), in that order; [] where it cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            present = set(next(line for line in f if line.startswith("flags")).split(":", 1)[1].split())
    except (OSError, StopIteration):
        return []
    return [flag for flag in CPU_FLAGS if flag in present]


def print_table(rows: list[dict], columns: list[tuple[str, str]]) -> None:
    """Rows of dicts as a fixed-width table; columns are (key, format) pairs, e.g. ("TF ms", ".3f")."""
    widths = [max(len(key), 10) + 2 for key, _ in columns]
    print("".join(f"{key:>{w}}" if i else f"{key:<{w + 16}}" for i, ((key, _), w) in enumerate(zip(columns, widths))))
    for row in rows:
        cells = []
        for i, ((key, fmt), w) in enumerate(zip(columns, widths)):
            value = row.get(key, "")
            text = format(value, fmt) if isinstance(value, (int, float)) and fmt else str(value)
            cells.append(f"{text:>{w}}" if i else f"{text:<{w + 16}}")
        print("".join(cells), flush=True)


def markdown_table(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    """The same rows and columns as print_table, as a Markdown table."""
    lines = ["| " + " | ".join(key for key, _ in columns) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(columns))) + "|"]  # fmt: skip
    for row in rows:
        cells = []
        for key, fmt in columns:
            value = row.get(key, "")
            cells.append(format(value, fmt) if isinstance(value, (int, float)) and fmt else str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def chart(bars: list[tuple[str, str, float]], path: Path, title: str = "tftvm vs TF, measured in one run") -> None:
    """Horizontal bars of ratio to TF (log scale), one colour per series, 1.0 marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = sorted({s for _, s, _ in bars}, key=[s for _, s, _ in bars].index)
    colours = dict(zip(series, plt.get_cmap("tab10").colors))
    fig, ax = plt.subplots(figsize=(10, 0.28 * len(bars) + 1.5))
    y = list(range(len(bars)))[::-1]
    ax.barh(y, [r for _, _, r in bars], color=[colours[s] for _, s, _ in bars])
    ax.set_yticks(y, [f"{label} [{s}]" for label, s, _ in bars], fontsize=7)
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("time / TF time (log scale; < 1 is faster than TF)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
