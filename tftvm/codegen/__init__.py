"""`tftvm.codegen`: a standalone C++ TF op project for one tftvm op, to read, build and own."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from .project import write_project


def codegen(op, out_dir, *, reference=None, op_type: str | None = None) -> Path:
    """Write a project that builds `op` as a named TF op of its own, and return its path.

    `op`: a `tftvm.op(...)` (or what `tftvm.op` takes: a PrimFunc, an IRModule with one
    function). The project holds `NAME_op.cc` (REGISTER_OP, a shape function from the
    TVM buffers' shapes, an OpKernel calling TVM through tvm-ffi), the compiled TVM
    library, `build.sh` (g++ only) and `CMakeLists.txt`, `test_NAME.py`, and a README.
    `reference`: a NumPy function of the inputs (defined with `def`) that the generated
    test checks the op against; without it the test checks outputs recorded now.
    `op_type`: the TF op name (default: the op's name in CamelCase).
    """
    from ..op import TvmOp, op as make_op

    if not isinstance(op, TvmOp):
        op = make_op(op)
    return write_project(op, Path(out_dir), reference=reference, op_type=op_type)


def load_object(spec: str):
    """`path/to/file.py:NAME` -> the object NAME defined in that file (for the CLI)."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise ValueError(f"{spec!r}: expected FILE.py:NAME")
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"{file}: no such file")
    module_spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(module_spec)
    sys.path.insert(0, str(file.parent.resolve()))  # the file may import its neighbours
    try:
        module_spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    if not hasattr(module, name):
        raise AttributeError(f"{file} defines no '{name}'")
    return getattr(module, name)
