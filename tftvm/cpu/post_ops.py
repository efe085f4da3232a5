"""What a bf16 product kernel does to its f32 results as it writes them (oneDNN's post-ops).

A bias add, a residual add and a ReLU after a matmul or conv would each be a pass over the
product's output in memory; the kernels in this folder apply them to each block of results
while it is in registers or cache, and write the final value once. Both units' kernels
(amx.py, avx512_bf16.py) take the same post-ops, so precision.py fuses them the same way.
"""
from __future__ import annotations

import dataclasses


ACTIVATIONS = (None, "relu", "relu6")


@dataclasses.dataclass(frozen=True)
class PostOps:
    """What a kernel applies to each block of results as it writes them, while they are in
    registers or cache (oneDNN's post-ops): + bias[column], then + residual[same element] where
    `residual`, then `activation`. The kernel then takes `bias` ([n] f32) and, with `residual`,
    a tensor of its output's shape after the packed weights."""

    residual: bool = False
    activation: str | None = None

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")

    def name(self) -> str:
        return "_bias" + ("_residual" if self.residual else "") + (f"_{self.activation}" if self.activation else "")

    def apply(self, value, bias, residual, index: tuple):
        """The result written for accumulator `value` at output `index` (TIR expressions)."""
        from tvm.script import tirx as T

        value = value + bias[index[-1]]
        if self.residual:
            value = value + residual[index]
        if self.activation == "relu":
            value = T.max(value, T.float32(0))
        elif self.activation == "relu6":
            value = T.min(T.max(value, T.float32(0)), T.float32(6))
        return value


def without_unread_params(func, post: PostOps | None):
    """`func` without the post-op params that `post` does not read: a kernel is written with
    a bias param `Bias` and a residual param `R`, and a variant without post-ops drops both,
    one without a residual drops `R`."""
    from tvm import tirx

    unread = ["Bias", "R"] if post is None else [] if post.residual else ["R"]
    keep = [p for p in func.params if p.name not in unread]
    return tirx.PrimFunc(keep, func.body, func.ret_type, func.attrs)
