"""What a TVM function takes and returns, read from its own buffers.

Dims are kept as reverse-Polish strings over constants ("c64"), variables
("v0") and + - * / % min max: the same text the C++ shape function and kernel
evaluate (see _native/shape_spec.h), so Python and C++ cannot disagree.
"""
from __future__ import annotations

import dataclasses
import json
import operator
from typing import Sequence

import tensorflow as tf

SUPPORTED_DTYPES = (
    "float16", "bfloat16", "float32", "float64",
    "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "bool",
)  # fmt: skip

_BINARY_OPS = {"Add": "+", "Sub": "-", "Mul": "*", "FloorDiv": "/", "FloorMod": "%",
               "Min": "min", "Max": "max"}  # fmt: skip
_RESERVED = set(";|,#= ")


@dataclasses.dataclass(frozen=True)
class TensorSig:
    name: str
    dtype: str
    dims: tuple[str, ...]  # reverse-Polish dim expressions
    # A scalar PrimFunc parameter: a rank-0 TF tensor whose value TVM gets as a number.
    # `binds` is the index of the shape variable that value sets (-1: none).
    scalar: bool = False
    binds: int = -1

    @property
    def spec(self) -> str:
        if self.scalar:
            return f"{self.name}={'' if self.binds < 0 else f'v{self.binds}'}|"
        return f"{self.name}|{','.join(self.dims)}"

    @property
    def tf_dtype(self) -> tf.DType:
        return tf.as_dtype(self.dtype)


@dataclasses.dataclass(frozen=True)
class Signature:
    inputs: tuple[TensorSig, ...]
    outputs: tuple[TensorSig, ...]
    var_names: tuple[str, ...]

    def __post_init__(self):
        for t in self.inputs + self.outputs:
            if t.dtype not in SUPPORTED_DTYPES:
                raise TypeError(
                    f"buffer '{t.name}' has dtype {t.dtype}; tftvm supports {', '.join(SUPPORTED_DTYPES)}"
                )
        bound = {d for t in self.inputs for d in t.dims if lone_var(d) is not None}
        bound |= {f"v{t.binds}" for t in self.inputs if t.binds >= 0}
        for t in self.outputs:
            if t.scalar:
                raise ValueError(f"output '{t.name}' is a scalar; outputs must be buffers")
        for t in self.inputs + self.outputs:
            for d in t.dims:
                for token in d.split():
                    if token.startswith("v") and token not in bound:
                        raise ValueError(
                            f"buffer '{t.name}' has a dim that uses "
                            f"'{self.var_names[int(token[1:])]}', which no input dim "
                            "determines on its own; give it as a plain dim of some input "
                            "or as a scalar parameter"
                        )

    def _spec(self, tensors: Sequence[TensorSig], header: bool) -> str:
        body = ";".join(t.spec for t in tensors)
        return (" ".join(self.var_names) + "#" + body) if header else body

    @property
    def in_spec(self) -> str:
        return self._spec(self.inputs, header=True)

    @property
    def out_spec(self) -> str:
        return self._spec(self.outputs, header=False)

    def format_shape(self, t: TensorSig) -> str:
        if t.scalar:
            return " (scalar)"
        return "[" + ", ".join(_format_dim(d, self.var_names) for d in t.dims) + "]"

    def describe(self, func_name: str) -> str:
        args = ", ".join(f"{t.name}: {t.dtype}{self.format_shape(t)}" for t in self.inputs)
        outs = ", ".join(f"{t.dtype}{self.format_shape(t)}" for t in self.outputs)
        return f"{func_name}({args}) -> ({outs})"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Signature":
        d = json.loads(text)

        def sig(t):
            return TensorSig(t["name"], t["dtype"], tuple(t["dims"]), bool(t.get("scalar", False)),
                             int(t.get("binds", -1)))  # fmt: skip

        return cls(tuple(map(sig, d["inputs"])), tuple(map(sig, d["outputs"])), tuple(d["var_names"]))

    @classmethod
    def from_prim_func(cls, func, num_outputs: int = 1) -> "Signature":
        """Destination-passing style: the trailing `num_outputs` buffer params are outputs."""
        params = list(func.params)
        if not 1 <= num_outputs <= len(params):
            raise ValueError(
                f"num_outputs={num_outputs} but the PrimFunc has {len(params)} buffer params"
            )
        variables: list = []
        tensors = [_tensor_sig(p, variables) for p in params]
        names = _unique_names([v.name for v in variables])
        split = len(params) - num_outputs
        return cls(tuple(tensors[:split]), tuple(tensors[split:]), tuple(names))

    @classmethod
    def from_shapes(cls, inputs, outputs) -> "Signature":
        """From (name, dtype, dims) triples whose dims are ints or variable-name strings."""
        names: list[str] = []

        def sig(name, dtype, dims):
            out = []
            for d in dims:
                if isinstance(d, str):
                    if d not in names:
                        names.append(d)
                    out.append(f"v{names.index(d)}")
                else:
                    out.append(f"c{int(d)}")
            return TensorSig(_check_name(name), str(dtype), tuple(out))

        ins = tuple(sig(*t) for t in inputs)
        return cls(ins, tuple(sig(*t) for t in outputs), tuple(names))


def _check_name(name: str) -> str:
    if not name or set(name) & _RESERVED:
        raise ValueError(f"buffer name {name!r} must be non-empty and free of {''.join(sorted(_RESERVED))!r}")
    return name


def _unique_names(names: list[str]) -> list[str]:
    out: list[str] = []
    for n in names:
        n = "".join("_" if c in _RESERVED else c for c in n) or "v"
        base, i = n, 1
        while n in out:
            i += 1
            n = f"{base}{i}"
        out.append(n)
    return out


def _tensor_sig(param, variables: list) -> TensorSig:
    from tvm import tirx

    ty = param.ty
    if not isinstance(ty, tirx.BufferType):
        if not str(getattr(ty, "dtype", "")):
            raise TypeError(f"PrimFunc parameter '{param.name}' has type {ty}; tftvm takes buffers and scalars")
        binds = _dim(param, variables, param.name) if str(ty.dtype).startswith(("int", "uint")) else ""
        return TensorSig(_check_name(param.name), str(ty.dtype), (), True, int(binds[1:]) if binds else -1)
    if len(ty.strides) or not _is_zero(ty.elem_offset):
        raise ValueError(
            f"buffer '{param.name}' has strides or an element offset; tftvm passes dense, "
            "offset-free tensors"
        )
    dims = tuple(_dim(e, variables, param.name) for e in ty.shape)
    return TensorSig(_check_name(param.name), str(ty.dtype), dims)


def _is_zero(expr) -> bool:
    from tvm import tirx

    return isinstance(expr, tirx.IntImm) and int(expr.value) == 0


def _dim(expr, variables: list, buffer: str) -> str:
    from tvm import tirx

    if isinstance(expr, tirx.IntImm):
        return f"c{int(expr.value)}"
    if isinstance(expr, tirx.Var):
        for i, v in enumerate(variables):
            if v.same_as(expr):
                return f"v{i}"
        variables.append(expr)
        return f"v{len(variables) - 1}"
    if isinstance(expr, tirx.Cast):
        return _dim(expr.value, variables, buffer)
    op = _BINARY_OPS.get(type(expr).__name__)
    if op is None:
        raise ValueError(
            f"buffer '{buffer}' has shape expression {expr} ({type(expr).__name__}); tftvm "
            "supports constants, variables and + - * floordiv floormod min max of them"
        )
    return f"{_dim(expr.a, variables, buffer)} {_dim(expr.b, variables, buffer)} {op}"


def lone_var(dim: str) -> int | None:
    """The variable's index if the dim is a variable alone, else None."""
    return int(dim[1:]) if dim.startswith("v") and " " not in dim else None


def fold_dim(dim: str, const, var, apply):
    """Walk a reverse-Polish dim bottom up: `const(int)`, `var(index)`, `apply(op, a, b)`."""
    stack = []
    for token in dim.split():
        if token[0] == "c":
            stack.append(const(int(token[1:])))
        elif token[0] == "v":
            stack.append(var(int(token[1:])))
        else:
            b, a = stack.pop(), stack.pop()
            stack.append(apply(token, a, b))
    return stack[-1]


def _format_dim(dim: str, var_names: Sequence[str]) -> str:
    def apply(token, a, b):
        return f"{token}({a}, {b})" if token in ("min", "max") else f"({a} {'//' if token == '/' else token} {b})"

    return fold_dim(dim, str, lambda v: var_names[v], apply)


_ARITHMETIC = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.floordiv,
               "%": operator.mod, "min": min, "max": max}  # fmt: skip


def evaluate_dim(dim: str, values: Sequence[int | None]) -> int | None:
    """A dim's value given the variables' values; None if it needs an unknown one.

    Division and modulo round down, as in TVM; a zero divisor gives None.
    """

    def apply(token, a, b):
        known = a is not None and b is not None and not (token in ("/", "%") and b == 0)
        return _ARITHMETIC[token](a, b) if known else None

    return fold_dim(dim, int, lambda v: values[v], apply)


def symbolic_reason(func) -> str | None:
    """Why MetaSchedule cannot measure `func` (it needs concrete buffers), or None."""
    from tvm import tirx

    for param in func.params:
        if not isinstance(param.ty, tirx.BufferType):
            return f"scalar parameter '{param.name}'"
        dims = [str(d) for d in param.ty.shape if not isinstance(d, tirx.IntImm)]
        if dims:
            return f"buffer '{param.name}' has symbolic dims {dims}"
    return None
