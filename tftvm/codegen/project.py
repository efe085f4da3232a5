"""Writes the standalone custom-op project for one tftvm op, from templates/."""
from __future__ import annotations

import inspect
import logging
import re
import string
import textwrap
from pathlib import Path

import numpy as np

from . import cpp
from ..signature import Signature, evaluate_dim

log = logging.getLogger(__name__)

TEMPLATES = Path(__file__).parent / "templates"
_SAMPLE_SIZES = (5, 3, 7, 4, 6, 2)  # the test's value for each shape variable, in turn


class _Template(string.Template):
    delimiter = "@"  # C++, shell and CMake all use `$`


def _render(template: str, values: dict) -> str:
    return _Template((TEMPLATES / template).read_text()).substitute(values)


def _check_op_type(op_type: str) -> str:
    from tensorflow.python.framework import op_def_registry

    if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", op_type):
        raise ValueError(f"op_type={op_type!r}: a TF op name is CamelCase letters and digits, e.g. 'AddBias'")
    if op_def_registry.get(op_type) is not None:
        raise ValueError(f"TensorFlow already has an op named '{op_type}'; pass op_type= with another name")
    return op_type


def _sample_inputs(sig: Signature, rng: np.random.Generator) -> list[np.ndarray]:
    """Inputs of shapes that fit the signature, each variable set to a small size."""
    values = [_SAMPLE_SIZES[v % len(_SAMPLE_SIZES)] for v in range(len(sig.var_names))]
    inputs = []
    for t in sig.inputs:
        shape = tuple(evaluate_dim(d, values) for d in t.dims)
        if t.scalar:
            value = values[t.binds] if t.binds >= 0 else (2 if t.dtype != "bool" else True)
            inputs.append(np.asarray(value, dtype=np.float32 if t.dtype == "bfloat16" else t.dtype))
        elif t.dtype == "bool":
            inputs.append(rng.integers(0, 2, shape).astype(bool))
        elif t.dtype.startswith(("int", "uint")):
            inputs.append(rng.integers(0, 10, shape).astype(t.dtype))  # small: they may be indices
        else:  # numpy has no bfloat16: the test converts it with tf.constant
            inputs.append(rng.standard_normal(shape).astype(np.float32 if t.dtype == "bfloat16" else t.dtype))
    return inputs


def _reference_code(reference, n_inputs: int, n_outputs: int) -> tuple[str, str]:
    """The test's `expected_outputs`: your NumPy function, or the outputs saved beside it."""
    if reference is None:
        code = f'''def expected_outputs(data):
    """Outputs that tftvm's generic op computed when this project was generated.

    For an independent check, replace them with a NumPy reference of the function.
    """
    return [data[f"output{{o}}"] for o in range({n_outputs})]'''
        return code, "outputs recorded by tftvm"
    if not inspect.isfunction(reference) or reference.__name__ == "<lambda>":
        raise TypeError(f"reference must be a function defined with `def`, got {reference!r}")
    source = textwrap.dedent(inspect.getsource(reference))
    code = f'''{source.rstrip()}


def expected_outputs(data):
    """`{reference.__name__}`, the NumPy reference, on the saved inputs."""
    out = {reference.__name__}(*[data[f"input{{i}}"] for i in range({n_inputs})])
    return list(out) if isinstance(out, (list, tuple)) else [out]'''
    return code, f"the NumPy reference `{reference.__name__}`"


def _target_text(op) -> str:
    if op.prim_func is None:
        return "the target it was compiled for"
    from ..kernel import resolve_target

    target = resolve_target(op.compile_options.get("target"))
    mcpu = target.attrs.get("mcpu")
    return f"{target.kind.name}, mcpu {mcpu}" if mcpu else target.kind.name


def write_project(op, out_dir: Path, *, reference=None, op_type: str | None = None) -> Path:
    sig = op.signature
    if not sig.inputs:
        raise ValueError(f"tftvm op '{op.name}' has no inputs; codegen writes ops that take at least one")
    op_type = _check_op_type(op_type or cpp.op_type_name(op.name))
    names = cpp.Names.of(sig)
    name = cpp.python_name(op_type)
    files = dict(op_source=f"{name}_op.cc", op_library=f"{name}_op.so", kernel_library=f"{name}_kernel.so",
                 testdata=f"{name}_testdata.npz", test=f"test_{name}.py")  # fmt: skip
    inputs = _sample_inputs(sig, np.random.default_rng(0))
    arrays = {f"input{i}": x for i, x in enumerate(inputs)}
    reference_code, against = _reference_code(reference, len(sig.inputs), len(sig.outputs))
    if reference is None:
        outputs = op(*[_tf_constant(x, t.dtype) for x, t in zip(inputs, sig.inputs)])
        outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        arrays |= {f"output{o}": _numpy(y) for o, y in enumerate(outputs)}
    unknown = [None] * len(sig.var_names)
    values = dict(
        files,
        name=name,
        op_type=op_type,
        target=f"{name}_op",
        func_name=op.kernel.func_name,
        version=_version(),
        description=sig.describe(op.kernel.func_name),
        target_text=_target_text(op),
        against=against,
        testdata_extra=" and expected outputs" if reference is None else "",
        shape_function=_indent(cpp.shape_function(sig, names), 2),
        compute_body=_indent(cpp.compute_body(sig, names), 4),
        register_op="\n".join(cpp.register_op(sig, names)),
        input_dtypes=repr([t.dtype for t in sig.inputs]),
        output_dtypes=repr([t.dtype for t in sig.outputs]),
        input_specs=repr([[evaluate_dim(d, unknown) for d in t.dims] for t in sig.inputs]),
        output_shapes=repr([[evaluate_dim(d, unknown) for d in t.dims] for t in sig.outputs]),
        reference=reference_code,
        bad_rank_arg=names.args[0],
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / files["op_source"]).write_text(_render("op.cc", values))
    (out_dir / "build.sh").write_text(_render("build.sh", values))
    (out_dir / "build.sh").chmod(0o755)
    (out_dir / "CMakeLists.txt").write_text(_render("CMakeLists.txt", values))
    (out_dir / files["test"]).write_text(_render("test_op.py", values))
    (out_dir / "README.md").write_text(_render("README.md", values))
    (out_dir / files["kernel_library"]).write_bytes(op.kernel.library)
    np.savez(out_dir / files["testdata"], **arrays)
    log.info("wrote the %s op project to %s", op_type, out_dir)
    return out_dir


def _indent(lines: list[str], spaces: int) -> str:
    return "\n".join(" " * spaces + line if line else "" for line in lines)


def _tf_constant(x: np.ndarray, dtype: str):
    import tensorflow as tf

    return tf.constant(x, dtype=dtype)


def _numpy(y) -> np.ndarray:
    return y.numpy().astype(np.float32) if y.dtype.name == "bfloat16" else y.numpy()


def _version() -> str:
    from ..version import __version__

    return __version__
