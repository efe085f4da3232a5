"""What the lowering passes ask of a Relax function's bindings: which variable holds a value,
which values read a variable, and a tensor's dims."""
from __future__ import annotations


def readers_and_vars(func):
    """(bound value -> its variable, variable -> the values that read it) of `func`; the
    function's result reads as None."""
    from tvm import relax

    var_of, readers = {}, {}
    for block in func.body.blocks:
        for binding in block.bindings:
            var_of[binding.value] = binding.var
            for v in relax.analysis.free_vars(binding.value):
                readers.setdefault(v, []).append(binding.value)
    for v in relax.analysis.free_vars(func.body.body):
        readers.setdefault(v, []).append(None)
    return var_of, readers


def static_dims(dims) -> list | None:
    """`dims` as ints, or None where one is symbolic."""
    from tvm import tirx

    return [int(d.value) for d in dims] if all(isinstance(d, tirx.IntImm) for d in dims) else None


def shape_of(expr):
    """The dims of a tensor-typed Relax expression, or None where they are not known."""
    shape = getattr(expr.ty, "shape", None)
    return list(shape.values) if shape is not None and hasattr(shape, "values") else None
