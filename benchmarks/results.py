"""Every benchmark in one run: writes benchmarks/RESULTS.md and benchmarks/results.png.

    python benchmarks/results.py [--quick] [--trials N] [--trials-per-kernel N] [--time-budget S]

Runs, in this order and in this one process: dispatch overhead (overhead.py), the
NMT attention batch matmuls, the fused batch matmul + transpose and the fused
attention (attention.py, each op tuned with --trials), and the end-to-end models
(optimize.py: TF, XLA, tftvm untuned, and for the small CNN and the Transformer
block tftvm tuned with --trials-per-kernel, at most --time-budget seconds each).
Every ratio is to TF measured in the same run. The Markdown file records the
machine, versions, trials and tuning times; the chart shows every ratio to TF.
Takes 35-50 minutes on 2 cores (nearly all of it tuning); --quick is a smoke run.
Needs `pip install -e ".[bench]"` (MetaSchedule's packages and matplotlib).
"""
from __future__ import annotations

import argparse
import datetime
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TFTVM_CACHE_DIR", tempfile.mkdtemp(prefix="tftvm-results-"))  # a cold kernel cache

import attention  # noqa: E402
import optimize  # noqa: E402
import overhead  # noqa: E402
from common import chart, machine, markdown_table  # noqa: E402

HERE = Path(__file__).parent
OVERHEAD_COLUMNS = [("case", ""), ("TF µs", ".1f"), ("tftvm µs", ".1f"), ("tftvm/TF", ".2f")]


BEGIN = "<!-- results.py: begin (benchmarks/results.py rewrites what is between these lines) -->"
END = "<!-- results.py: end -->"


def write_section(path: Path, text: str) -> None:
    """Put `text` between RESULTS.md's results.py markers, leaving the other tables (each
    benchmark's current one) as they are; a file without the markers gets the section at its end."""
    old = path.read_text() if path.exists() else "# tftvm benchmark results\n"
    before, found, rest = old.partition(BEGIN)
    after = rest.partition(END)[2] if found else ""
    path.write_text(f"{before.rstrip()}\n\n{BEGIN}\n{text.strip()}\n{END}\n{after.lstrip()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="few shapes, few trials: a smoke run")
    parser.add_argument("--trials", type=int, help="tuning trials per attention op (default 64; 8 quick)")
    parser.add_argument("--trials-per-kernel", type=int, default=None, help="end-to-end models (default 24; 2 quick)")
    parser.add_argument("--time-budget", type=float, default=None, help="tuning seconds per model (default 420)")
    parser.add_argument("--out", default=str(HERE), help="where RESULTS.md and results.png go")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")  # progress of tuning
    per_kernel = args.trials_per_kernel or (2 if args.quick else 24)
    budget = args.time_budget or (60.0 if args.quick else 420.0)
    repeats = 10 if args.quick else 50
    start = time.perf_counter()
    dispatch = overhead.run(5 if args.quick else 21)
    sections = attention.run(trials=args.trials, repeats=repeats, quick=args.quick)
    models = optimize.run(repeats, {"trials_per_kernel": per_kernel, "time_budget": budget})
    total = time.perf_counter() - start

    command = ("python benchmarks/results.py " + " ".join(sys.argv[1:])).strip()
    md = ["## Made by results.py\n", f"Made by `{command}` on {datetime.date.today()} in {total / 60:.0f} min. "
          f"{machine()}. Every ratio is to TF measured in the same run; < 1 is faster than TF. Chart: `results.png`.\n",
          "### Dispatch overhead\n", markdown_table(dispatch, OVERHEAD_COLUMNS), ""]  # fmt: skip
    columns = {"fused attention": attention.ATTENTION_COLUMNS, "tuning": attention.TUNING_COLUMNS}
    for name, rows in sections.items():
        md += [f"### {name}\n", markdown_table(rows, columns.get(name, attention.MATMUL_COLUMNS)), ""]
        md += [f"- {r['case']}: {r['error']}" for r in rows if "error" in r] + [""]
    md += ["### End to end (`tftvm.optimize`)\n",
           f"Untuned: symbolic batch, default CPU schedule. Static and tuned: static batch; tuned with "
           f"{per_kernel} trials per kernel, at most {budget:.0f} s of tuning per model.\n",
           markdown_table([m for m in models if "error" not in m], optimize.COLUMNS), "",
           markdown_table([m for m in models if "tuned ms" in m], optimize.TUNED_COLUMNS), ""]  # fmt: skip
    md += [f"- {m['model']}: tftvm failed: {m['error']}" for m in models if "error" in m]
    out = Path(args.out)
    write_section(out / "RESULTS.md", "\n".join(md))

    bars = [(r["case"], "tftvm", r["tftvm/TF"]) for r in dispatch]
    series = (("XLA/TF", "XLA"), ("untuned/TF", "untuned"), ("tftvm/TF", "untuned"), ("static/TF", "static"),
              ("tuned/TF", "tuned"))  # fmt: skip
    for rows, label in [*((rows, "case") for name, rows in sections.items() if name != "tuning"), (models, "model")]:
        for r in rows:
            bars += [(r[label], name, r[key]) for key, name in series if isinstance(r.get(key), float)]
    chart(bars, out / "results.png")
    print("\n".join(md))
    print(f"wrote {out / 'RESULTS.md'} and {out / 'results.png'}")


if __name__ == "__main__":
    main()
