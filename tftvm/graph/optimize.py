"""`tftvm.optimize`: offload the TVM-convertible parts of a TF graph, keep the rest in TF.

The function is frozen, its loop and branch bodies and then its main graph go through the
offload pipeline (offload/pipeline.py), and the result is a `tf.Module` whose call replays the
graph with the clusters' kernels."""
from __future__ import annotations

import tensorflow as tf

from .. import tunable
from .lowering import precision as precisions
from .offload import control_flow, report, safety_net
from .offload.pipeline import offload
from .tfgraph.freeze import freeze


class Optimized(tf.Module):
    """The optimized function: call it, trace it, save it; `report()` says what ran where."""

    def __init__(self, frozen, clusters, reasons, run, input_signature, rebuild):
        super().__init__()
        self._frozen, self._clusters, self._reasons = frozen, clusters, reasons
        self._rebuild = rebuild
        structure = frozen.structured_outputs

        def call(*args):  # args are structured as the signature (e.g. a list of two tensors)
            flat = run(*tf.nest.flatten(args))
            return tf.nest.pack_sequence_as(structure, flat) if structure is not None else flat

        # An instance attribute, so tf.saved_model.save keeps it and the loaded object is callable.
        self.__call__ = tf.function(call, input_signature=list(input_signature), autograph=False)
        self.validation: list[tuple[float, float]] = []  # (max abs, max rel) error per output
        self.bodies: list = []  # control_flow.Body per While/If body function

    def __call__(self, *args):  # Python looks special methods up on the class
        return self.__dict__["__call__"](*args)

    def kernels(self) -> list:
        """The tftvm ops of every compiled cluster, the main graph's then the loop and branch
        bodies' (those that replaced their original), in cluster order: what `tftvm.tune` tunes."""
        clusters = list(self._clusters)
        clusters += [c for b in control_flow.flatten(self.bodies) if b.replacement for c in b.clusters]
        return [k for c in clusters if c.program is not None for k in c.program.kernels]

    def rebuilt(self, **options) -> "Optimized":
        """`optimize` run again on the same function and signature with `options` changed
        (e.g. database=): the kernel cache makes the unchanged kernels cheap."""
        return self._rebuild(**options)

    def tuning(self, shapes=None) -> tunable.Tuning:
        """What `tftvm.tune` tunes: every kernel (those with symbolic dims are skipped)."""
        tunable.no_shapes(shapes)
        return tunable.of_ops(self.kernels(), self.rebuilt, self)

    def summary(self) -> report.ConversionReport:
        """What ran where, as data: compute nodes, offloaded count, TF ops with reasons,
        failed clusters with errors."""
        return report.summarize(self._frozen, self._clusters, self._reasons, self._body_offloaded())

    def _body_offloaded(self) -> int:
        return sum(b.offloaded for b in control_flow.flatten(self.bodies))

    @property
    def precision(self) -> precisions.PrecisionReport:
        """What precision="bf16" moved to bf16 units, over all compiled clusters."""
        return precisions.combined([c.program.precision for c in self._clusters if c.program is not None])

    def report(self) -> str:
        text = report.format_report(self._frozen, self._clusters, self._reasons, self._body_offloaded())
        text += "\n" + report.bodies_text(control_flow.flatten(self.bodies)) if self.bodies else ""
        for i, (abs_err, rel_err) in enumerate(self.validation):
            text += f"\nvalidation: output {i}: max abs error {abs_err:.3g}, max rel error {rel_err:.3g}"
        return text


def optimize(fn, input_signature=None, *, cache_size: int = 8, min_cluster_size: int = 3,
             max_clusters: int | None = None, allow: set | None = None, deny: set | None = None, strict: bool = False,
             target=None, progress=None, validate=False, database=None, keep_faster=None,
             precision: str = "f32") -> Optimized:  # fmt: skip
    """Cluster the supported nodes of `fn`'s graph, compile each cluster with TVM, and
    return a callable that runs the clusters as tftvm ops and everything else in TF.

    `progress(done, total, step)` is called after each cluster is compiled.
    `validate=True` (random inputs, unknown dims = 2) or a list of inputs runs the
    original and the optimized function side by side; the errors go into the report.
    `database` (default $TFTVM_TUNING_DB): MetaSchedule records from `tftvm.tune`;
    kernels with a record compile their tuned schedule.
    `keep_faster` (default True, or $TFTVM_KEEP_FASTER=0 for False): time each compiled
    cluster in TVM and in TF (`None` dims at 1, and at 8 where it has some) and keep TF's
    where it is faster; where that depends on the size, the graph switches between them
    per call by the size of the cluster's inputs. The report gives the times. The timings
    are cached with the kernels.
    `precision="bf16"`: matmuls and convs take bf16 inputs with f32 accumulation, on the
    CPU's AMX tiles or else its AVX512-BF16 instructions where it has them (else they stay
    f32); the report says which ran.
    Without `input_signature`, each new input signature compiles a variant (LRU of
    `cache_size`); a second shape of the same pattern compiles a symbolic variant.
    """
    options = dict(min_cluster_size=min_cluster_size, max_clusters=max_clusters, allow=allow, deny=deny,
                   strict=strict, target=target, progress=progress, database=database,
                   keep_faster=safety_net.enabled(keep_faster), precision=precisions.check(precision))  # fmt: skip
    if input_signature is None:
        from .adaptive import AdaptiveOptimized

        return AdaptiveOptimized(fn, lambda sig, **changed: optimize(fn, sig, **{**options, **changed}), cache_size)
    frozen = freeze(fn, input_signature)
    # A body's weights are constants: what is computed from them alone runs once, memoized.
    in_bodies = {**options, "progress": None, "memoize_weights": True}
    frozen, bodies = control_flow.optimize_bodies(frozen, lambda body: offload(body, **in_bodies), strict=strict)
    clusters, reasons, run = offload(frozen, **options)
    optimized = Optimized(frozen, clusters, reasons, run, input_signature,
                          lambda **changed: optimize(fn, input_signature, **{**options, **changed}))  # fmt: skip
    optimized.bodies = bodies  # control_flow.Body per While/If body function
    if validate is not False:
        inputs = _random_inputs(input_signature) if validate is True else list(validate)
        optimized.validation = _compare(fn, optimized, inputs)
    return optimized


def _random_inputs(input_signature) -> list:
    import numpy as np

    rng = np.random.default_rng(0)

    def make(spec):
        shape = [2 if d is None else d for d in spec.shape.as_list()]
        if spec.dtype.is_floating:
            return tf.constant(rng.standard_normal(shape), dtype=spec.dtype)
        return tf.constant(rng.integers(0, 4, shape), dtype=spec.dtype)

    return tf.nest.map_structure(make, list(input_signature))


def _compare(fn, optimized, inputs) -> list[tuple[float, float]]:
    import numpy as np

    want = tf.nest.flatten(fn(*inputs))
    got = tf.nest.flatten(optimized(*inputs))
    errors = []
    for w, g in zip(want, got):
        w, g = np.asarray(w, dtype=np.float64), np.asarray(g, dtype=np.float64)
        abs_err = float(np.max(np.abs(w - g))) if w.size else 0.0
        rel_err = float(np.max(np.abs(w - g) / np.maximum(np.abs(w), 1e-12))) if w.size else 0.0
        errors.append((abs_err, rel_err))
    return errors
