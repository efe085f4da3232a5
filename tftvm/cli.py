"""The `tftvm` command."""
from __future__ import annotations

import argparse
import logging
import os
import platform
import shutil
import sys


def _demo(args) -> int:
    from . import demo

    print("tftvm demo: TVM-compiled kernels inside TensorFlow, checked against TF and timed here.\n")
    outcome = demo.run(progress=lambda message: print(f"  {message} ...", flush=True))
    print(f"\nresults match TF (max rel error {outcome.max_rel_error:.1e}); {outcome.offloaded}\n")
    print(f"{'workload':<28}{'compared with':<21}{'its ms':>9}{'tftvm ms':>10}{'tftvm/it':>10}")
    for row in outcome.rows:
        ratio = row.tftvm_ms / row.baseline_ms
        print(f"{row.what:<28}{row.baseline:<21}{row.baseline_ms:>9.3f}{row.tftvm_ms:>10.3f}{ratio:>10.2f}")
    print("""
Against TF's frozen graph the difference is TVM's kernels alone; against the Keras model it
also holds what freezing gives (constants folded), which tftvm.optimize does too.
Next:
  tftvm.optimize(model, [tf.TensorSpec(...)])   your model, its clusters on TVM; .report() says what ran where
  tftvm.enable()                                every graph TF builds from then on, unchanged code
  tftvm.compile_model(model, [spec])            the whole model on TVM's VM, TF for what TVM lacks
  tftvm.tune(result, trials=..., database=...)  MetaSchedule tuning of any of them
  docs/tutorials/, docs/guide.md, docs/architecture.md""")
    return 0


def _doctor(args) -> int:
    import tensorflow as tf
    import tvm
    import tvm_ffi

    from . import cache_dir, kernel, native
    from .version import __version__

    if args.forget_timings:
        from .graph.offload.safety_net import forget_timings

        print(f"forgot {forget_timings()} cached timings of the safety net; each cluster is measured again")

    cxx = os.environ.get("CXX", "g++")
    print(f"tftvm          {__version__}")
    print(f"python         {platform.python_version()}")
    print(f"tensorflow     {tf.__version__}")
    print(f"apache-tvm     {tvm.__version__}")
    print(f"apache-tvm-ffi {tvm_ffi.__version__}")
    print(f"compiler       {shutil.which(cxx) or cxx + ' (not found)'}")
    print(f"cache root     {cache_dir.cache_root()}")
    print(f"bridge library {native.library_path()}")
    print(f"module dir     {cache_dir.module_dir()}")
    print(f"default target {kernel.resolve_target(None)}")
    from .graph.lowering.precision import bf16_units

    print(f"bf16 products  {bf16_units() or 'f32 (this CPU has no bf16 instructions tftvm uses)'}")
    try:
        native.load()
    except Exception as err:  # doctor reports every failure instead of raising
        print(f"bridge loads   no: {err}")
        return 1
    print("bridge loads   yes")
    from .trust import embedded_modules_allowed

    print(f"embedded code  {'allowed' if embedded_modules_allowed() else 'refused (TFTVM_ALLOW_EMBEDDED_MODULES)'}")
    return 0


def _load_signature(args):
    """The SavedModel signature as a positional function, its input names and specs."""
    import tensorflow as tf

    loaded = tf.saved_model.load(args.src)
    if args.signature not in loaded.signatures:
        raise _UsageError(f"{args.src} has no signature '{args.signature}'; it has {sorted(loaded.signatures)}")
    fn = loaded.signatures[args.signature]
    names = sorted(fn.structured_input_signature[1])
    specs = [fn.structured_input_signature[1][n] for n in names]

    def call(*inputs):
        return fn(**dict(zip(names, inputs)))

    call._tftvm_keep = loaded  # the signature's variables live as long as the function
    return call, names, specs


class _UsageError(Exception):
    """A bad command line: printed without a traceback, exit status 2."""


def _cluster_progress(done, total, step):
    status = "ok" if step.program is not None else f"stays in TF ({step.error})"
    bar = "#" * (20 * done // total)
    print(f"[{bar:<20}] cluster {done}/{total}: {len(step.nodes)} nodes, "
          f"{step.compile_seconds:.1f} s, {status}", flush=True)  # fmt: skip


def _tune_progress(p):
    bar = "#" * min(20, 20 * p.trials_done // p.trials)
    print(f"[{bar:<20}] trials {p.trials_done}/{p.trials} over {p.tasks} kernels, {p.elapsed_s:.0f} s",
          flush=True)  # fmt: skip


def _save(fast, args, names) -> None:
    import tensorflow as tf

    signature = fast.__call__.get_concrete_function()
    tf.saved_model.save(fast, args.out, signatures={args.signature: signature})
    print(fast.report())
    print(f"saved {args.out} (inputs in order: {', '.join(names)})")


def _optimize(args) -> int:
    from .graph.optimize import optimize

    call, names, specs = _load_signature(args)
    fast = optimize(call, specs, min_cluster_size=args.min_cluster_size, progress=_cluster_progress,
                    database=args.database)  # fmt: skip
    _save(fast, args, names)
    return 0


def _tune(args) -> int:
    """Optimize with the unknown batch dim fixed, tune every kernel, save the tuned model."""
    import tensorflow as tf

    from . import rpc_runner
    from .graph.optimize import optimize
    from .tune import tune

    try:
        tracker = rpc_runner.parse(args.rpc)
        if tracker is not None:
            tracker.servers()  # before the model compiles: no tracker, no server is a quick error
    except (ValueError, rpc_runner.RPCUnavailableError) as err:
        raise _UsageError(str(err)) from None
    call, names, specs = _load_signature(args)
    static = []
    for name, spec in zip(names, specs):
        dims = spec.shape.as_list()
        if dims and dims[0] is None:
            dims[0] = args.batch
        if None in dims:
            raise _UsageError(f"input '{name}' has unknown dims {spec.shape} besides the batch: "
                              "MetaSchedule tunes concrete shapes; export the model with static shapes")  # fmt: skip
        static.append(tf.TensorSpec(dims, spec.dtype))
    fast = optimize(call, static, min_cluster_size=args.min_cluster_size, progress=_cluster_progress)
    where = f", measured on the RPC servers under {tracker}" if tracker else ""
    print(f"tuning {len(fast.kernels())} kernels, {args.trials} trials, database {args.database}{where}", flush=True)
    tuned = tune(fast, trials=args.trials, database=args.database, time_budget=args.time_budget,
                 progress=_tune_progress, rpc=str(tracker) if tracker else None)  # fmt: skip
    _save(tuned, args, names)
    return 0


def _codegen(args) -> int:
    from .codegen import codegen, load_object

    file = args.target.rpartition(":")[0]
    try:
        target = load_object(args.target)
        reference = load_object(f"{file}:{args.reference}") if args.reference else None
    except (ValueError, OSError, AttributeError) as err:
        raise _UsageError(str(err)) from None
    out = codegen(target, args.out, reference=reference, op_type=args.op_type)
    print(f"wrote {out}: build it with `{out}/build.sh`, then test it with "
          f"`python {out}/test_*.py`; {out}/README.md explains each file")
    return 0


def _build_native(args) -> int:
    from . import native

    print(native.build(force=args.force))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tftvm", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="a TVM kernel as a TF op and a Keras CNN through optimize, checked and timed")
    doctor = sub.add_parser("doctor", help="print versions, compiler, cache paths, bridge status")
    doctor.add_argument("--forget-timings", action="store_true",
                        help="first drop the safety net's cached TVM-vs-TF timings (after a change of machine or load)")
    build = sub.add_parser("build-native", help="build (or rebuild) the bridge op library")
    build.add_argument("--force", action="store_true", help="rebuild even if cached")
    opt = sub.add_parser("optimize", help="offload a SavedModel's TVM-convertible subgraphs")
    opt.add_argument("src", help="SavedModel directory to read")
    opt.add_argument("out", help="SavedModel directory to write")
    opt.add_argument("--signature", default="serving_default", help="signature to optimize")
    opt.add_argument("--min-cluster-size", type=int, default=3)
    opt.add_argument("--database", help="MetaSchedule records from `tftvm tune` (default $TFTVM_TUNING_DB)")
    tun = sub.add_parser("tune", help="optimize a SavedModel, tune its TVM kernels, save the tuned model")
    tun.add_argument("src", help="SavedModel directory to read")
    tun.add_argument("out", help="SavedModel directory to write")
    tun.add_argument("--database", required=True, help="tuning database directory (created; records kept)")
    tun.add_argument("--trials", type=int, default=64, help="measured candidates in all (default 64)")
    tun.add_argument("--time-budget", type=float, help="stop searching after this many seconds")
    tun.add_argument("--batch", type=int, default=1, help="the batch size to tune for (default 1)")
    tun.add_argument("--signature", default="serving_default", help="signature to optimize")
    tun.add_argument("--min-cluster-size", type=int, default=3)
    tun.add_argument("--rpc", metavar="HOST:PORT:KEY",
                     help="measure on the servers under KEY of this TVM RPC tracker (default $TFTVM_RPC)")
    gen = sub.add_parser("codegen", help="write a standalone C++ TF op project for one TVM function")
    gen.add_argument("target", metavar="FILE.py:NAME",
                     help="a tftvm op (or a PrimFunc / IRModule) defined in FILE.py")
    gen.add_argument("--out", required=True, help="directory to write the project into")
    gen.add_argument("--reference", metavar="FUNC",
                     help="a NumPy function in the same file for the generated test to check against")
    gen.add_argument("--op-type", help="the TF op name (default: NAME in CamelCase)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")  # fmt: skip
    handler = {"demo": _demo, "doctor": _doctor, "build-native": _build_native,
               "optimize": _optimize, "tune": _tune, "codegen": _codegen}[args.command]  # fmt: skip
    try:
        return handler(args)
    except _UsageError as err:
        print(f"tftvm {args.command}: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
