"""`tftvm.check(op, *inputs)`: one call of a tftvm op, checked every way TF can run it.

In the spirit of `torch.library.opcheck`: the eager result is the reference; TF's shape
function must predict the shapes eager produces (for the inputs' exact shapes, and with
every dim unknown); `tf.function`, `jit_compile` (XLA, as a custom call) and a SavedModel
reloaded in this process must give the eager numbers; where the op has a gradient, the
declared one must match a numeric (finite difference) gradient.
"""
from __future__ import annotations

import dataclasses
import tempfile

import numpy as np


@dataclasses.dataclass
class Result:
    check: str
    passed: bool
    detail: str


@dataclasses.dataclass
class CheckReport:
    op: str
    results: list

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def __str__(self) -> str:
        width = max(len(r.check) for r in self.results)
        lines = [f"tftvm.check of '{self.op}': {'passed' if self.passed else 'FAILED'}"]
        lines += [f"  {'ok  ' if r.passed else 'FAIL'} {r.check:<{width}}  {r.detail}" for r in self.results]
        return "\n".join(lines)


def check(op, *inputs, rtol: float = 1e-5, atol: float = 1e-6, grad_tolerance: float = 2e-2,
          raise_on_failure: bool = True) -> CheckReport:  # fmt: skip
    """Run `op(*inputs)` eagerly, in a tf.function, under jit_compile and from a SavedModel,
    compare shapes and numbers, and the declared gradient with a numeric one. Without
    `inputs`, random ones that fit the op's signature (`sample_inputs`). Returns the report;
    raises AssertionError with it where a check fails (unless raise_on_failure=False)."""
    import tensorflow as tf

    if not inputs and op.signature.inputs:
        inputs = sample_inputs(op.signature)

    if len(inputs) != len(op.signature.inputs):
        raise TypeError(f"tftvm.check: '{op.name}' takes {len(op.signature.inputs)} inputs, got {len(inputs)}")
    tensors = [tf.convert_to_tensor(x, dtype=t.tf_dtype) for x, t in zip(inputs, op.signature.inputs)]
    want = _flat(op(*tensors))
    # A scalar that sets a dim goes in as a constant where shapes must be known (the exact
    # shape check; XLA, whose shapes are static).
    sizes = {i: t.numpy() for i, (t, sig) in enumerate(zip(tensors, op.signature.inputs)) if sig.scalar and sig.binds >= 0}

    def with_sizes(*args):
        return op(*[tf.constant(sizes[i]) if i in sizes else a for i, a in enumerate(args)])

    results = [_shape_function(op, with_sizes, tensors, want)]
    results.append(_same("tf.function", want, lambda: _flat(tf.function(op)(*tensors)), 0.0, 0.0))
    jitted = tf.function(with_sizes, jit_compile=True)
    # Where every input is such a constant, TF folds the op before XLA sees it: nothing to find.
    folded = len(sizes) == len(tensors)
    custom_call = lambda: folded or "tftvm_call" in jitted.experimental_get_compiler_ir(*tensors)(stage="hlo")  # noqa: E731
    results.append(_same("jit_compile", want, lambda: _flat(jitted(*tensors)), rtol, atol, custom_call))
    if folded and results[-1].passed:
        results[-1].detail += " (every input is a constant there: TF folds the op before XLA)"
    results.append(_same("SavedModel", want, lambda: _flat(_reloaded_call(op, tensors)), 0.0, 0.0))
    results.append(_gradient(op, tensors, grad_tolerance))
    report = CheckReport(op.name, results)
    if raise_on_failure and not report.passed:
        raise AssertionError(str(report))
    return report


def sample_inputs(signature, seed: int = 0) -> list:
    """Random NumPy inputs that fit `signature`: shape variable i is 3 + i (distinct sizes catch
    swapped dims), a scalar that sets a variable carries its value, other scalars are 1."""
    from .signature import evaluate_dim

    rng = np.random.default_rng(seed)
    values = [3 + i for i in range(len(signature.var_names))]
    out = []
    for t in signature.inputs:
        dtype = np.dtype(t.dtype) if t.dtype != "bfloat16" else np.float32
        if t.scalar:
            out.append(np.array(values[t.binds] if t.binds >= 0 else 1, dtype))
            continue
        shape = [evaluate_dim(d, values) for d in t.dims]
        if dtype.kind == "f":
            data = rng.standard_normal(shape)
        elif dtype.kind == "b":
            data = rng.integers(0, 2, shape)
        else:
            data = rng.integers(0 if dtype.kind == "u" else -5, 6, shape)
        out.append(data.astype(dtype))
    return out


def _flat(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _shape_function(op, with_sizes, tensors, want) -> Result:
    import tensorflow as tf

    exact = tf.function(with_sizes).get_concrete_function(*[tf.TensorSpec(t.shape, t.dtype) for t in tensors])
    unknown = tf.function(op).get_concrete_function(*[tf.TensorSpec([None] * t.shape.rank, t.dtype) for t in tensors])
    problems = []
    for i, (w, e, u) in enumerate(zip(want, _flat(exact.structured_outputs), _flat(unknown.structured_outputs))):
        if e.shape.as_list() != w.shape.as_list():
            problems.append(f"output {i}: shape function {e.shape}, eager {w.shape}")
        if not u.shape.is_compatible_with(w.shape):
            problems.append(f"output {i}: with unknown dims the shape function says {u.shape}, eager {w.shape}")
    shapes = ", ".join(str(w.shape) for w in want)
    return Result("shape function", not problems, "; ".join(problems) or f"predicts {shapes}")


def _same(name, want, run, rtol, atol, also=None) -> Result:
    try:
        got = run()
        extra = also() if also is not None else True
    except Exception as err:  # noqa: BLE001  a check that cannot run fails with the reason
        return Result(name, False, f"{type(err).__name__}: {str(err).splitlines()[0][:300]}")
    if not extra:
        return Result(name, False, "no tftvm_call custom call in XLA's program (the op fell back)")
    worst = 0.0
    for w, g in zip(want, got):
        w, g = np.asarray(w, np.float64), np.asarray(g, np.float64)
        if w.shape != g.shape:
            return Result(name, False, f"shape {g.shape}, eager {w.shape}")
        if w.size:
            excess = np.abs(g - w) - (atol + rtol * np.abs(w))
            if np.any(excess > 0) or np.isnan(g).sum() != np.isnan(w).sum():
                return Result(name, False, f"max abs difference {np.nanmax(np.abs(g - w)):.3g} from eager")
            worst = max(worst, float(np.nanmax(np.abs(g - w))) if np.isfinite(g).any() else 0.0)
    return Result(name, True, "matches eager" + (f" (max abs difference {worst:.2g})" if worst else ""))


def _reloaded_call(op, tensors):
    """`op(*tensors)` run by a SavedModel that calls it, saved and loaded again."""
    import tensorflow as tf

    module = tf.Module()
    module.f = tf.function(lambda *a: op(*a), input_signature=[tf.TensorSpec([None] * t.shape.rank, t.dtype)
                                                                for t in tensors])  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="tftvm_check_") as path:
        tf.saved_model.save(module, path)
        return tf.saved_model.load(path).f(*tensors)


def _gradient(op, tensors, tolerance) -> Result:
    import tensorflow as tf

    floats = [i for i, t in enumerate(tensors) if t.dtype.is_floating]
    if op._tftvm_grad is None or not floats:
        return Result("gradient", True, "no gradient declared" if op._tftvm_grad is None else "no float input")

    def loss(*xs):  # a fixed random projection of every output: one scalar to differentiate
        args = list(tensors)
        for i, x in zip(floats, xs):
            args[i] = x
        outs = [o for o in _flat(op(*args)) if o.dtype.is_floating]
        return tf.add_n([tf.reduce_sum(o * w) for o, w in zip(outs, weights)])

    rng = np.random.default_rng(0)
    weights = [tf.constant(rng.standard_normal(o.shape), o.dtype) for o in _flat(op(*tensors)) if o.dtype.is_floating]
    try:
        theoretical, numerical = tf.test.compute_gradient(loss, [tensors[i] for i in floats], delta=1e-3)
    except Exception as err:  # noqa: BLE001
        return Result("gradient", False, f"{type(err).__name__}: {str(err).splitlines()[0][:300]}")
    worst = 0.0
    for t, n in zip(theoretical, numerical):
        scale = max(1.0, float(np.max(np.abs(n))) if n.size else 1.0)
        worst = max(worst, float(np.max(np.abs(t - n))) / scale if t.size else 0.0)
    ok = worst <= tolerance
    return Result("gradient", ok, f"declared vs numeric: max difference {worst:.2g} (relative to the largest entry)")
