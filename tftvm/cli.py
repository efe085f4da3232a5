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

    print("Building a fused bias+GELU TVM kernel and using it in a TF model ...")
    rows = demo.run()
    print("results match TF (rtol 1e-5)\n")
    print(f"{'workload':<26}{'TF µs':>10}{'tftvm µs':>12}{'tftvm/TF':>10}")
    for what, tf_us, tvm_us in rows:
        print(f"{what:<26}{tf_us:>10.1f}{tvm_us:>12.1f}{tvm_us / tf_us:>10.2f}")
    return 0


def _doctor(args) -> int:
    import tensorflow as tf
    import tvm
    import tvm_ffi

    from . import __version__, cache_dir, kernel, native

    cxx = os.environ.get("CXX", "g++")
    print(f"tftvm          {__version__}")
    print(f"python         {platform.python_version()}")
    print(f"tensorflow     {tf.__version__}")
    print(f"apache-tvm     {tvm.__version__}")
    print(f"apache-tvm-ffi {tvm_ffi.__version__}")
    print(f"compiler       {shutil.which(cxx) or cxx + ' (not found)'}")
    print(f"cache root     {cache_dir.cache_root()}")
    print(f"bridge library {native.library_path()}")
    print(f"module dir     {kernel.module_dir()}")
    print(f"default target {kernel.resolve_target(None)}")
    try:
        native.load()
    except Exception as err:  # doctor reports every failure instead of raising
        print(f"bridge loads   no: {err}")
        return 1
    print("bridge loads   yes")
    return 0


def _optimize(args) -> int:
    import tensorflow as tf

    from .graph.optimize import optimize

    loaded = tf.saved_model.load(args.src)
    if args.signature not in loaded.signatures:
        print(f"{args.src} has no signature '{args.signature}'; it has {sorted(loaded.signatures)}",
              file=sys.stderr)  # fmt: skip
        return 2
    fn = loaded.signatures[args.signature]
    names = sorted(fn.structured_input_signature[1])
    specs = [fn.structured_input_signature[1][n] for n in names]

    def call(*inputs):
        return fn(**dict(zip(names, inputs)))

    def progress(done, total, step):
        status = "ok" if step.program is not None else f"stays in TF ({step.error})"
        bar = "#" * (20 * done // total)
        print(f"[{bar:<20}] cluster {done}/{total}: {len(step.nodes)} nodes, "
              f"{step.compile_seconds:.1f} s, {status}", flush=True)  # fmt: skip

    fast = optimize(call, specs, min_cluster_size=args.min_cluster_size, progress=progress)
    signature = fast.__call__.get_concrete_function()
    tf.saved_model.save(fast, args.out, signatures={args.signature: signature})
    print(fast.report())
    print(f"saved {args.out} (inputs in order: {', '.join(names)})")
    return 0


def _build_native(args) -> int:
    from . import native

    print(native.build(force=args.force))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tftvm", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="build a TVM kernel, use it in a TF model, compare with TF")
    sub.add_parser("doctor", help="print versions, compiler, cache paths, bridge status")
    build = sub.add_parser("build-native", help="build (or rebuild) the bridge op library")
    build.add_argument("--force", action="store_true", help="rebuild even if cached")
    opt = sub.add_parser("optimize", help="offload a SavedModel's TVM-convertible subgraphs")
    opt.add_argument("src", help="SavedModel directory to read")
    opt.add_argument("out", help="SavedModel directory to write")
    opt.add_argument("--signature", default="serving_default", help="signature to optimize")
    opt.add_argument("--min-cluster-size", type=int, default=3)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")  # fmt: skip
    handler = {"demo": _demo, "doctor": _doctor, "build-native": _build_native,
               "optimize": _optimize}[args.command]  # fmt: skip
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
