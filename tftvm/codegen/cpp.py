"""The per-op C++ of a generated op: names, the shape function and the kernel's checks.

Everything here is written from a Signature, the same description the generic
TvmCall op works from; dims arrive as the Signature's reverse-Polish strings.
"""
from __future__ import annotations

import dataclasses
import keyword
import re

from ..signature import Signature, TensorSig, fold_dim, lone_var

# TF's type name (REGISTER_OP), C++ element type, DLPack dtype, per tftvm dtype.
DTYPES = {
    "float16": ("half", "Eigen::half", "{kDLFloat, 16, 1}"),
    "bfloat16": ("bfloat16", "Eigen::bfloat16", "{kDLBfloat, 16, 1}"),
    "float32": ("float", "float", "{kDLFloat, 32, 1}"),
    "float64": ("double", "double", "{kDLFloat, 64, 1}"),
    "int8": ("int8", "int8_t", "{kDLInt, 8, 1}"),
    "int16": ("int16", "int16_t", "{kDLInt, 16, 1}"),
    "int32": ("int32", "int32_t", "{kDLInt, 32, 1}"),
    "int64": ("int64", "int64_t", "{kDLInt, 64, 1}"),
    "uint8": ("uint8", "uint8_t", "{kDLUInt, 8, 1}"),
    "uint16": ("uint16", "uint16_t", "{kDLUInt, 16, 1}"),
    "uint32": ("uint32", "uint32_t", "{kDLUInt, 32, 1}"),
    "uint64": ("uint64", "uint64_t", "{kDLUInt, 64, 1}"),
    "bool": ("bool", "bool", "{kDLBool, 8, 1}"),
}

# Names the generated functions use for their own locals: the kernel's (where the
# tensors are locals too) and, for the shape variables, also the shape function's.
_KERNEL_LOCALS = {"ctx", "args", "bound", "function_", "std", "tensorflow"}
_SHAPE_LOCALS = {"c", "unused", "unused_shape"}
_CPP_KEYWORDS = {
    "auto", "bool", "break", "case", "char", "class", "const", "continue", "default", "delete",
    "do", "double", "else", "enum", "explicit", "extern", "false", "float", "for", "friend",
    "goto", "if", "inline", "int", "long", "namespace", "new", "operator", "private",
    "protected", "public", "register", "return", "short", "signed", "sizeof", "static",
    "struct", "switch", "template", "this", "throw", "true", "try", "typedef", "union",
    "unsigned", "using", "virtual", "void", "volatile", "while", "and", "or", "not", "xor",
}  # fmt: skip


def op_type_name(name: str) -> str:
    """`add_bias` -> `AddBias`: TF op names are CamelCase."""
    words = [w for w in re.split(r"[^0-9A-Za-z]+", name) if w]
    camel = "".join(w[0].upper() + w[1:] for w in words) or "TvmOp"
    return camel if camel[0].isalpha() else "Tvm" + camel


def python_name(op_type: str) -> str:
    """The name TF gives the op's Python wrapper: `AddBias` -> `add_bias`."""
    s = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", op_type)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()


def _identifier(name: str, taken: set[str]) -> str:
    """A lower-case C++ and TF-argument name for `name`, unique within `taken`."""
    base = re.sub(r"[^0-9a-z_]", "_", name.lower()).strip("_") or "x"
    if base[0].isdigit():
        base = "x" + base
    if base in _CPP_KEYWORDS or keyword.iskeyword(base) or base == "name":
        base += "_"
    out, i = base, 1
    while out in taken:
        i += 1
        out = f"{base}{i}"
    taken.add(out)
    return out


@dataclasses.dataclass(frozen=True)
class Names:
    """The generated code's names for the signature's tensors and shape variables."""

    args: tuple[str, ...]  # TF argument names, inputs then outputs
    locals: tuple[str, ...]  # their C++ locals: the name itself, `NAME_scalar` for a scalar
    vars: tuple[str, ...]  # C++ locals for the shape variables (a scalar often shares its name)

    @classmethod
    def of(cls, sig: Signature) -> "Names":
        taken = set(_KERNEL_LOCALS)
        tensors = sig.inputs + sig.outputs
        args = tuple(_identifier(t.name, taken) for t in tensors)
        cpp_locals = tuple(f"{a}_scalar" if t.scalar else a for a, t in zip(args, tensors))
        taken = _KERNEL_LOCALS | _SHAPE_LOCALS | set(cpp_locals) | {f"{a}_shape" for a in args}
        shape_vars = tuple(_identifier(v, taken) for v in sig.var_names)
        return cls(args, cpp_locals, shape_vars)


def _binary(token: str, a: str, b: str) -> str:
    if token in ("min", "max"):
        return f"std::{token}<int64_t>({a}, {b})"
    if token == "/":
        return f"FloorDiv({a}, {b})"
    if token == "%":
        return f"FloorMod({a}, {b})"
    return f"({a} {token} {b})"


def value_expr(dim: str, names: Names) -> str:
    """A dim as a C++ int64 expression over the shape variables."""
    expr = fold_dim(dim, str, lambda v: names.vars[v], _binary)
    return expr[1:-1] if expr.startswith("(") and expr.endswith(")") else expr


_DIM_OPS = {"+": "Add", "-": "Subtract", "*": "Multiply", "min": "Min", "max": "Max"}


class _ShapeDims:
    """Builds a dim as a TF DimensionHandle, with a statement per arithmetic step."""

    def __init__(self, names: Names):
        self.names = names
        self.lines: list[str] = []
        self._count = 0

    def handle(self, dim: str) -> str:
        """A C++ expression usable where TF takes a DimensionOrConstant."""
        return fold_dim(dim, str, lambda v: self.names.vars[v], self._step)

    def _step(self, token: str, a: str, b: str) -> str:
        self._count += 1
        out = f"tmp_d{self._count}"
        first = f"c->MakeDim({a})" if a.isdigit() else a
        if token == "%":  # TF's shape functions have no modulo: known when the op runs
            self.lines.append(f"DimensionHandle {out} = c->UnknownDim();  // {a} % {b}")
        elif token == "/":
            self.lines.append(f"DimensionHandle {out};")
            self.lines.append(f"TF_RETURN_IF_ERROR(c->Divide({first}, {b}, /*evenly_divisible=*/false, &{out}));")
        else:
            self.lines.append(f"DimensionHandle {out};")
            self.lines.append(f"TF_RETURN_IF_ERROR(c->{_DIM_OPS[token]}({first}, {b}, &{out}));")
        return out


def _binding_sites(sig: Signature) -> dict[int, tuple[int, int | None]]:
    """For each shape variable, where its value comes from: (input, dim), dim None for a scalar.

    Scalars first, then the first input dim that is the variable alone: the order
    the generic op binds them in.
    """
    sites: dict[int, tuple[int, int | None]] = {}
    for i, t in enumerate(sig.inputs):
        if t.scalar and t.binds >= 0:
            sites.setdefault(t.binds, (i, None))
    for i, t in enumerate(sig.inputs):
        for d, dim in enumerate(t.dims):
            v = lone_var(dim)
            if v is not None:
                sites.setdefault(v, (i, d))
    return sites


def shape_function(sig: Signature, names: Names) -> list[str]:
    """The body of the op's shape function (graph-build-time shapes)."""
    lines: list[str] = []
    tensors = [(i, t) for i, t in enumerate(sig.inputs) if not t.scalar]
    if tensors:
        lines.append("ShapeHandle " + ", ".join(f"{names.args[i]}_shape" for i, _ in tensors) + ";")
    if any(t.scalar for t in sig.inputs):
        lines.append("ShapeHandle unused_shape;")
    for i, t in enumerate(sig.inputs):
        target = "&unused_shape" if t.scalar else f"&{names.args[i]}_shape"
        lines.append(f"TF_RETURN_IF_ERROR(c->WithRank(c->input({i}), {len(t.dims)}, {target}));"
                     f"  // {t.name}: {_shape_text(sig, t)}")  # fmt: skip
    sites = _binding_sites(sig)
    if sites:
        lines.append("")
        lines.append("// The shape variables, from a scalar input or an input dim that is the variable alone.")
    for v in sorted(sites):
        i, d = sites[v]
        var = names.vars[v]
        if d is not None:
            lines.append(f"DimensionHandle {var} = c->Dim({names.args[i]}_shape, {d});")
        elif sig.inputs[i].dtype in ("int32", "int64"):
            lines.append(f"DimensionHandle {var};")
            lines.append(f"TF_RETURN_IF_ERROR(c->MakeDimForScalarInput({i}, &{var}));")
        else:  # TF reads only int32/int64 scalars at graph-build time
            lines.append(f"DimensionHandle {var} = c->UnknownDim();")
    checks = _ShapeDims(names)
    check_lines: list[str] = []
    for i, t in enumerate(sig.inputs):
        for d, dim in enumerate(t.dims):
            v = lone_var(dim)
            here = f"c->Dim({names.args[i]}_shape, {d})"
            if v is not None:
                if sites[v] != (i, d):
                    check_lines.append(f"TF_RETURN_IF_ERROR(c->Merge({names.vars[v]}, {here}, &{names.vars[v]}));")
            elif dim.startswith("c") and " " not in dim:
                check_lines.append(f"TF_RETURN_IF_ERROR(c->WithValue({here}, {dim[1:]}, &unused));")
            else:
                want = checks.handle(dim)
                check_lines.extend(checks.lines)
                checks.lines = []
                check_lines.append(f"TF_RETURN_IF_ERROR(c->Merge({here}, {want}, &unused));")
    if check_lines:
        lines += ["", "// Every other input dim must agree with the variables.", "DimensionHandle unused;"]
        lines += check_lines
    lines += ["", "// The outputs' shapes; a dim TF cannot know yet stays unknown."]
    for o, t in enumerate(sig.outputs):
        dims = [checks.handle(dim) for dim in t.dims]
        lines += checks.lines
        checks.lines = []
        shape = f"c->MakeShape({{{', '.join(dims)}}})" if dims else "c->Scalar()"
        lines.append(f"c->set_output({o}, {shape});  // {t.name}: {_shape_text(sig, t)}")
    lines.append("return absl::OkStatus();")
    return lines


def _shape_text(sig: Signature, t: TensorSig) -> str:
    return "scalar" if t.scalar else sig.format_shape(t)


def _scalar_value(t: TensorSig, local: str) -> str:
    """A scalar input as TVM takes it: integers as int64, floats as double, bool as bool."""
    cpp = DTYPES[t.dtype][1]
    value = f"{local}.scalar<{cpp}>()()"
    if t.dtype == "bool":
        return value
    if t.dtype in ("float16", "bfloat16"):  # Eigen's 16-bit types convert through float
        return f"static_cast<double>(static_cast<float>({value}))"
    if t.dtype.startswith("float"):
        return f"static_cast<double>({value})"
    return f"static_cast<int64_t>({value})"


def compute_body(sig: Signature, names: Names) -> list[str]:
    """The body of the kernel's Compute: check inputs, allocate outputs, call TVM."""
    n_in = len(sig.inputs)
    lines = [f"const Tensor& {names.locals[i]} = ctx->input({i});" for i in range(n_in)]
    lines += ["", "// Ranks first, so every dim read below exists."]
    for i, t in enumerate(sig.inputs):
        a, local = names.args[i], names.locals[i]
        lines.append(f'OP_REQUIRES(ctx, {local}.dims() == {len(t.dims)}, ShapeError({i}, "{a}", "{_shape_text(sig, t)}", {local}));')
    sites = _binding_sites(sig)
    if sites:
        lines += ["", "// The shape variables, from a scalar input or an input dim that is the variable alone."]
    for v in sorted(sites):
        i, d = sites[v]
        local, var = names.locals[i], names.vars[v]
        source = _scalar_value(sig.inputs[i], local) if d is None else f"{local}.dim_size({d})"
        lines.append(f"const int64_t {var} = {source};")
    if sites:
        pairs = ", ".join(f'{{"{sig.var_names[v]}", {names.vars[v]}}}' for v in sorted(sites))
        lines.append(f"const std::string bound = Bindings({{{pairs}}});  // for error messages")
    bound = "bound" if sites else '""'
    first_check = True
    for i, t in enumerate(sig.inputs):
        conds = []
        for d, dim in enumerate(t.dims):
            v = lone_var(dim)
            if v is None or sites[v] != (i, d):  # not the dim that set the variable
                conds.append(f"{names.args[i]}.dim_size({d}) == {value_expr(dim, names)}")
        if not conds:
            continue
        if first_check:
            lines += ["", "// Every other input dim must agree with the variables."]
            first_check = False
        a = names.args[i]
        lines.append(f"OP_REQUIRES(ctx, {' && '.join(conds)},")
        lines.append(f'            ShapeError({i}, "{a}", "{_shape_text(sig, t)}", {a}, {bound}));')
    lines += ["", "// TF allocates the outputs; TVM writes them in place."]
    for o, t in enumerate(sig.outputs):
        a = names.args[n_in + o]
        dims = ", ".join(value_expr(dim, names) for dim in t.dims)
        lines.append(f"Tensor* {a} = nullptr;")
        lines.append(f'OP_REQUIRES_OK(ctx, AllocateOutput(ctx, {o}, "{a}", {{{dims}}}, {bound}, &{a}));')
    count = n_in + len(sig.outputs)
    lines += ["", "// The TVM function's arguments, in its parameter order: TF's buffers, no copies.",
              f"TvmArgs args(ctx, {count});"]  # fmt: skip
    for i, t in enumerate(sig.inputs):
        a = names.locals[i]
        if t.scalar:
            lines.append(f"args.AddScalar({_scalar_value(t, a)});")
        else:
            lines.append(f"OP_REQUIRES_OK(ctx, args.AddInput({a}, DLDataType{DTYPES[t.dtype][2]}));")
    for o, t in enumerate(sig.outputs):
        a = names.args[n_in + o]
        lines.append(f"OP_REQUIRES_OK(ctx, args.AddOutput({a}, DLDataType{DTYPES[t.dtype][2]}));")
    lines.append("OP_REQUIRES_OK(ctx, args.Call(*function_));")
    return lines


def register_op(sig: Signature, names: Names) -> list[str]:
    """The REGISTER_OP chain's .Input/.Output lines."""
    n_in = len(sig.inputs)
    lines = [f'    .Input("{names.args[i]}: {DTYPES[t.dtype][0]}")' for i, t in enumerate(sig.inputs)]
    lines += [f'    .Output("{names.args[n_in + o]}: {DTYPES[t.dtype][0]}")' for o, t in enumerate(sig.outputs)]
    return lines
