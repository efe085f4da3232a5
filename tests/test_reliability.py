"""benchmarks/stress.py, small: fuzzed calls, threads, leaks. Each part runs in its own process."""
import json
import subprocess
import sys

from conftest import ROOT

STRESS = ROOT / "benchmarks" / "stress.py"


def stress(*args: str) -> dict:
    proc = subprocess.run([sys.executable, str(STRESS), *args], capture_output=True, text=True, timeout=900)
    report = json.loads(proc.stdout[: proc.stdout.rindex("}") + 1])
    assert proc.returncode == 0 and report["crashes"] == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return report


def test_fuzzed_calls_give_numpy_results_or_clean_errors():
    # Every case either matched NumPy or raised TypeError / ValueError / InvalidArgument /
    # ResourceExhausted; valid calls (a share of the cases, built to fit) must succeed.
    report = stress("--part", "fuzz", "--cases", "300")
    assert report["cases"] == 300
    assert report["result"] >= 60 and report["clean error"] >= 60, report


def test_threads_and_inter_op_parallelism_give_correct_results():
    report = stress("--part", "threads", "--threads", "8", "--calls", "25")
    assert report["checked calls"] == 8 * 25 * 5 and report["inter-op threads"] == 4


def test_no_leaks_over_100k_eager_and_10k_graph_calls():
    report = stress("--part", "leaks", "--eager", "100000", "--graph", "10000")
    before, after = report["before"], report["after"]
    assert report["rss growth MiB"] < 16, report  # after warm-up; a leak of 160 bytes per call would show
    assert after["modules"] == before["modules"] and after["open_files"] == before["open_files"], report
