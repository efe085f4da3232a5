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
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")  # fmt: skip
    handler = {"demo": _demo, "doctor": _doctor, "build-native": _build_native}[args.command]
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
