"""Roofline: how close each of a model's TVM kernels comes to this CPU's practical peak.

    python benchmarks/roofline.py [--model NAME] [--size S] [--batch B] [--top N]
                                  [--database DIR] [--repeats R] [--markdown FILE]

The model (a benchmarks/zoo.py name, default ResNet50 at 224) is compiled by
`tftvm.compile_model` with a static program for batch B (`specialize`), tuned where
`--database` has records. Every kernel call of the Relax VM is timed (the VM's
instrument hook, medians over R runs of the model) and its FLOPs are TVM's own count
of the kernel's TIR (`estimate_tir_flops`: all its arithmetic, an epilogue's and a fast
exp's polynomial included); the bf16 kernels of tftvm/cpu, loops and intrinsics without TIR
blocks, are counted per call instead: 2 x output elements x the reduction's length. The yardstick is measured in the same run: the best GFLOP/s
of a 2048^3 float32 matmul in TF (oneDNN's sgemm) over all cores; the clock and FMA
width of a shared cloud CPU are not known, so no theoretical peak is claimed, and a
kernel may pass the yardstick (100+%). The table lists the kernels that take the most
time: their share, GFLOP/s and % of the sgemm rate; then the whole model's, on TVM (a VM
without the hook: the hook runs Python between kernels, long enough for TVM's threads to go
idle, so a small kernel's time in the table includes waking them) and on TF (the Keras
model in `tf.function`, the same FLOP count): a model that TF already runs near the sgemm
rate leaves TVM little room to be faster.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def sgemm_gflops(n: int = 2048, repeats: int = 10) -> float:
    """The best GFLOP/s of an n^3 float32 matmul in TF: the yardstick."""
    import tensorflow as tf

    a = tf.random.normal((n, n))
    matmul = tf.function(lambda x, y: tf.linalg.matmul(x, y))
    matmul(a, a).numpy()
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, a).numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def product_flops(call_args) -> float:
    """The FLOPs of one call of a bf16 product kernel of tftvm/cpu (A or X, packed weights,
    [bias, residual,] output): 2 per multiply-add, each output element a sum over the
    reduction, whose length the packed weights' shape gives ([n/16, k/2, 16, 2] or
    [o/16, kh, kw, c/2, 16, 2]: the dims between the first and the last two, times 2)."""
    weights, output = call_args[1], call_args[-1]
    return 2.0 * float(np.prod(output.shape)) * 2 * float(np.prod(weights.shape[1:-2]))


def kernel_times(vm, args, kernels: set[str], products: set[str], repeats: int) -> dict:
    """Per kernel name: the median over `repeats` model runs of its summed call time, its call
    count, and for `products` (kernels TVM's estimate cannot count) their FLOPs in a run."""
    per_run = defaultdict(list)
    current, started = {}, [0.0]

    def instrument(func, symbol, before_run, ret, *call_args):
        if symbol in kernels:
            if before_run:
                started[0] = time.perf_counter()
            else:
                current[symbol] = current.get(symbol, 0.0) + time.perf_counter() - started[0]
                current[symbol + "#calls"] = current.get(symbol + "#calls", 0) + 1
                if symbol in products:
                    current[symbol + "#flops"] = current.get(symbol + "#flops", 0.0) + product_flops(call_args)
        return 0

    vm["main"](*args)  # warm-up: first-touch of the memory plan
    vm.set_instrument(instrument)
    for _ in range(repeats):
        current.clear()
        vm["main"](*args)
        for name in kernels:
            if name in current:
                per_run[name].append((current[name], current[name + "#calls"], current.get(name + "#flops")))
    return {name: (float(np.median([s for s, _, _ in runs])), runs[0][1], runs[0][2]) for name, runs in per_run.items()}


def has_blocks(func) -> bool:
    """Does `func` compute in TIR blocks (what TVM's FLOP estimate counts), or is it written
    with loops and intrinsics alone (tftvm/cpu's bf16 kernels)?"""
    import tvm
    from tvm import s_tir

    try:
        s_tir.Schedule(tvm.IRModule({"main": func})).get_sblock("root")
    except Exception:  # no root block: written without blocks, as the default schedule also finds
        return False
    return True


def model_ms(executable, args, repeats: int) -> float:
    """The whole model's median time, on a VM of its own: a VM with an instrument hook calls
    it (Python) before and after every instruction, even a hook that does nothing."""
    import tvm

    vm = tvm.relax.VirtualMachine(executable, tvm.cpu())
    vm["main"](*args)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        vm["main"](*args)
        samples.append(time.perf_counter() - start)
    return 1e3 * float(np.median(samples))


def main() -> None:
    import tensorflow as tf
    import tvm
    from common import machine, median_ms, markdown_table, print_table
    from tvm.s_tir.analysis import estimate_tir_flops
    from zoo import models

    import tftvm

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="ResNet50")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--database", help="MetaSchedule database with tuned records (default: none)")
    parser.add_argument("--precision", default="f32", help="compile_model's precision (f32, bf16)")
    parser.add_argument("--markdown", help="also write the table as Markdown to this file")
    args = parser.parse_args()

    model, signature, make_inputs = models(args.size)[args.model]()
    inputs = [np.asarray(x) for x in make_inputs(np.random.default_rng(0), args.batch)]
    shapes = [x.shape for x in inputs]
    compiled = tftvm.compile_model(model, signature, keep_faster=False, specialize=[shapes],
                                   database=args.database or None, precision=args.precision)  # fmt: skip
    program = next(iter(compiled.statics.values()), None)
    executable = program.executable if program else compiled._executable  # a fully static signature has one
    vm = tvm.relax.VirtualMachine(executable, tvm.cpu())
    tvm_args = [tvm.runtime.tensor(x) for x in inputs]
    kernels = dict(compiled.static_kernels([shapes]))
    products = {name for name, f in kernels.items() if not has_blocks(f)}  # hand-written: tftvm/cpu
    flops = {name: estimate_tir_flops(tvm.IRModule({"main": f})) for name, f in kernels.items() if name not in products}

    peak = sgemm_gflops()
    times = kernel_times(vm, tvm_args, set(kernels), products, args.repeats)
    for name, (_, calls, run_flops) in times.items():
        if name in products:
            flops[name] = run_flops / calls  # per call, as the estimate gives it
    whole_ms = model_ms(executable, tvm_args, args.repeats)
    tf_ms = median_ms(tf.function(model), *make_inputs(np.random.default_rng(0), args.batch), repeats=args.repeats)
    kernel_ms = 1e3 * sum(s for s, _, _ in times.values())
    rows = []
    for name, (seconds, calls, _) in sorted(times.items(), key=lambda kv: -kv[1][0])[: args.top]:
        gflops = flops[name] * calls / seconds / 1e9
        rows.append({"kernel": name, "calls": calls, "ms": 1e3 * seconds, "share %": 100e3 * seconds / kernel_ms,
                     "GFLOP": flops[name] * calls / 1e9, "GFLOP/s": gflops, "% sgemm": 100 * gflops / peak})  # fmt: skip
    total_flops = sum(flops[name] * calls for name, (_, calls, _) in times.items())
    rows.append({"kernel": f"all {len(times)} kernels", "ms": kernel_ms, "share %": 100.0, "GFLOP": total_flops / 1e9,
                 "GFLOP/s": total_flops / kernel_ms / 1e6, "% sgemm": 100 * total_flops / kernel_ms / 1e6 / peak})  # fmt: skip
    rows.append({"kernel": "whole model (VM)", "ms": whole_ms, "GFLOP": total_flops / 1e9,
                 "GFLOP/s": total_flops / whole_ms / 1e6, "% sgemm": 100 * total_flops / whole_ms / 1e6 / peak})  # fmt: skip
    rows.append({"kernel": "TF (the Keras model in tf.function)", "ms": tf_ms, "GFLOP": total_flops / 1e9,
                 "GFLOP/s": total_flops / tf_ms / 1e6, "% sgemm": 100 * total_flops / tf_ms / 1e6 / peak})  # fmt: skip
    columns = [("kernel", ""), ("calls", "d"), ("ms", ".2f"), ("share %", ".1f"), ("GFLOP", ".3f"),
               ("GFLOP/s", ".1f"), ("% sgemm", ".1f")]  # fmt: skip
    tuned = f", {program.tuned if program else compiled.tuned_kernels} tuned kernels" if args.database else ", untuned"
    title = (f"{machine()} | {args.model} at {args.size}, batch {args.batch}{tuned}; "
             f"TF's 2048^3 sgemm {peak:.1f} GFLOP/s")  # fmt: skip
    print(title)
    print_table(rows, columns)
    if args.markdown:
        Path(args.markdown).write_text(f"{title}\n\n{markdown_table(rows, columns)}\n")


if __name__ == "__main__":
    main()
