"""What a bf16 product kernel does to its f32 results as it writes them (oneDNN's post-ops).

A bias add, a residual add and a ReLU after a matmul or conv would each be a pass over the
product's output in memory; the kernels in this folder apply them to each block of results
while it is in registers or cache, and write the final value once. Both units' kernels
(amx.py, avx512_bf16.py) take the same post-ops, so precision.py fuses them the same way.
"""
from __future__ import annotations

import dataclasses

ACTIVATIONS = (None, "relu", "relu6", "swish")  # swish: x * sigmoid(x) (SiLU; EfficientNet's)


@dataclasses.dataclass(frozen=True)
class PostOps:
    """What a kernel applies to each block of results as it writes them, while they are in
    registers or cache (oneDNN's post-ops): + bias[column], then + residual[same element] where
    `residual`, then `activation`, then rounded to `out_dtype`. The kernel then takes `bias`
    ([n] f32) and, with `residual`, an f32 tensor of its output's shape after the packed
    weights."""

    residual: bool = False
    activation: str | None = None
    out_dtype: str = "float32"  # the output's: "bfloat16" where every reader reads bf16 (half the bytes)

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.out_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"out_dtype must be float32 or bfloat16, got {self.out_dtype!r}")

    def name(self) -> str:
        return ("_bias" + ("_residual" if self.residual else "") + (f"_{self.activation}" if self.activation else "")
                + ("_to_bf16" if self.out_dtype == "bfloat16" else ""))  # fmt: skip

    def apply(self, value, bias, residual, index: tuple):
        """The result written for accumulator `value` at output `index` (TIR expressions), in
        `out_dtype`."""
        from tvm.script import tirx as T

        value = value + bias[index[-1]]
        if self.residual:
            value = value + residual[index]
        if self.activation == "relu":
            value = T.max(value, T.float32(0))
        elif self.activation == "relu6":
            value = T.min(T.max(value, T.float32(0)), T.float32(6))
        elif self.activation == "swish":
            value = value / (T.float32(1) + fast_exp(-value))
        return value if self.out_dtype == "float32" else T.Cast(self.out_dtype, value)


def written(post: PostOps | None, value, bias, residual, index: tuple):
    """What a kernel writes for accumulator `value` at output `index`: `post` applied, or the
    value itself by a variant without post-ops."""
    return value if post is None else post.apply(value, bias, residual, index)


def output_dtype(post: PostOps | None) -> str:
    """The dtype a kernel variant with `post` writes (f32 without post-ops)."""
    return "float32" if post is None else post.out_dtype


def fast_exp(x):
    """exp(x) of a float32 TIR expression as a vectorizable polynomial (the C library's expf,
    which LLVM calls per lane, would cost more than the product's write): x = n ln 2 + r with
    |r| <= ln 2 / 2, exp(r) by Cephes' degree-7 polynomial (relative error ~1e-7), times 2^n
    built in the exponent bits. x is clamped to [-87.3, 88.3], where 2^n is a normal float;
    a NaN stays NaN (the clamp's select keeps it)."""
    from tvm.script import tirx as T

    x = T.Select(x > T.float32(88.3), T.float32(88.3), T.Select(x < T.float32(-87.3), T.float32(-87.3), x))
    n = T.floor(x * T.float32(1.44269504088896341) + T.float32(0.5))
    r = x - n * T.float32(0.693359375) + n * T.float32(2.12194440e-4)  # ln 2 in two parts: r exact
    p = T.float32(1.9875691500e-4)
    for c in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = p * r + T.float32(c)
    p = p * r * r + r + T.float32(1)
    return p * T.reinterpret("float32", (T.Cast("int32", n) + 127) << 23)


def without_unread_params(func, post: PostOps | None):
    """`func` without the post-op params that `post` does not read: a kernel is written with
    a bias param `Bias` and a residual param `R`, and a variant without post-ops drops both,
    one without a residual drops `R`."""
    from tvm import tirx

    unread = ["Bias", "R"] if post is None else [] if post.residual else ["R"]
    keep = [p for p in func.params if p.name not in unread]
    return tirx.PrimFunc(keep, func.body, func.ret_type, func.attrs)
