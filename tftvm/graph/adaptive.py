"""optimize() without a fixed signature: compile per input signature, like tf.function.

Compiled variants live in an LRU keyed by the inputs' (shape, dtype). Once a
call pattern (ranks and dtypes) has been seen with two different shapes, the
dims that changed are compiled once as symbolic dims and that variant serves
every later shape of the pattern: no recompiling forever.
"""
from __future__ import annotations

import collections
import logging

import tensorflow as tf

from .. import tunable

log = logging.getLogger(__name__)


class AdaptiveOptimized:
    """`build(signature, **options)` compiles one variant (an Optimized)."""

    def __init__(self, fn, build, cache_size: int = 8):
        if cache_size < 1:
            raise ValueError(f"cache_size must be >= 1, got {cache_size}")
        self._fn, self._build, self._size = fn, build, cache_size
        self._variants: collections.OrderedDict = collections.OrderedDict()  # signature -> Optimized
        self._seen: dict = {}  # pattern -> first concrete shapes
        self.compiles = 0

    def _lookup(self, specs):
        for signature, variant in self._variants.items():
            if all(s.is_compatible_with(t) and s.dtype == t.dtype for s, t in zip(signature, specs)):
                self._variants.move_to_end(signature)
                return variant
        return None

    def __call__(self, *args):
        tensors = [tf.convert_to_tensor(a) for a in args]
        specs = tuple(tf.TensorSpec(t.shape, t.dtype) for t in tensors)
        variant = self._lookup(specs)
        if variant is None:
            variant = self._compile(specs)
        return variant(*tensors)

    def _compile(self, specs):
        pattern = tuple((s.shape.rank, s.dtype) for s in specs)
        first = self._seen.setdefault(pattern, specs)
        if first is not specs:  # a second shape: generalize the dims that differ
            specs = tuple(
                tf.TensorSpec([a if a == b else None for a, b in zip(f.shape.as_list(), s.shape.as_list())], s.dtype)
                for f, s in zip(first, specs)
            )  # fmt: skip
            log.info("retraced with a new shape: compiling symbolic variant %s", specs)
        variant = self._build(list(specs))
        self.compiles += 1
        self._variants[specs] = variant
        while len(self._variants) > self._size:
            self._variants.popitem(last=False)
        return variant

    def kernels(self) -> list:
        """The tftvm ops of every compiled variant (what `tftvm.tune` tunes: the static
        variants are the shapes the function was called with)."""
        return [k for variant in self._variants.values() for k in variant.kernels()]

    def rebuilt(self, **options) -> "AdaptiveOptimized":
        """The same variants, and the ones compiled later, built with `options` changed
        (`database=`: the tuned schedules)."""
        new = AdaptiveOptimized(self._fn, lambda sig, **more: self._build(sig, **{**options, **more}), self._size)
        new._seen = dict(self._seen)
        for signature, variant in self._variants.items():
            new._variants[signature] = variant.rebuilt(**options)
        return new

    def tuning(self, shapes=None) -> tunable.Tuning:
        """What `tftvm.tune` tunes: the kernels of the variants compiled so far."""
        tunable.no_shapes(shapes)
        kernels = self.kernels()
        if not kernels:
            raise ValueError("tftvm.tune: this tftvm.optimize result (no input_signature) has compiled nothing "
                             "yet: call it at the input shapes to tune for, then tune it")  # fmt: skip
        return tunable.of_ops(kernels, self.rebuilt, self)

    def report(self) -> str:
        parts = [f"{len(self._variants)} compiled variants ({self.compiles} compiles)"]
        for signature, variant in self._variants.items():
            parts.append(f"--- {[s.shape.as_list() for s in signature]}\n{variant.report()}")
        return "\n".join(parts)
