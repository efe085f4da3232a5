"""The reverse bridge: a whole TF model on TVM's Relax VM, TF only for what TVM lacks.

`tftvm.optimize` keeps the model in TF and moves clusters to TVM; `compile_model`
does the opposite split: one Relax program (one VM, one memory plan) runs the
model, and each op the converter table cannot take is a call from the VM back
into TF, zero copy both ways (DLPack).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import numbers
import threading
import time
from pathlib import Path

import numpy as np

from . import vm_threads
from .graph import whole
from .graph.frontend import Unsupported
from .graph.frontend.support import NOT_COMPUTE
from .graph.lowering import bounded_plan, fold_scales, fold_strides, lift_weights
from .graph.lowering.precision import PrecisionReport, check, to_bf16
from .graph.offload import control_flow, safety_net
from .graph.offload.pipeline import offload
from .graph.offload.report import ConversionReport, OpInTF, in_tf_with_bodies
from .graph.tfgraph.freeze import FrozenGraph, freeze, imported
from .graph.tfgraph.functions import graph_runner, register_functions, with_new_function_names
from .graph.tfgraph.names import tensor_name
from .graph.tfgraph.subgraph import cut_out
from .graph.tfgraph.weights import WEIGHT_BYTES, split, values, with_constants
from .kernel import pass_context_like_current
from .tensors import to_tf, to_tvm

log = logging.getLogger(__name__)

FORMAT = 2  # 2: weights an argument of the library's entries (lift_weights)
LIBRARY, GRAPH, MANIFEST, WEIGHTS = "model.so", "graph.pb", "tftvm_model.json", "weights.params"
NOALIAS_LAST = "zz_tftvm_noalias_last"  # see _fused_and_scheduled


@dataclasses.dataclass
class StaticProgram:
    """The model compiled for one set of concrete input shapes (`specialize=`): static
    kernels get the default schedule's static tiles, and tuned schedules where the
    database has records for them (which it only can for static shapes)."""

    shapes: tuple  # one tuple of ints per flat input
    executable: object
    kernels: int
    tuned: int
    weights: list = dataclasses.field(default_factory=list)  # its lifted weights (lift_weights), in order
    calls: int = 0
    vm: object = None  # its VirtualMachine, made by CompiledModel
    weights_arg: object = None  # `weights` as the one argument its entries take, made by CompiledModel


class CompiledModel:
    """Call it with NumPy arrays or TF tensors; `report()` says what ran in TF and for how long."""

    def __init__(self, frozen, fallbacks, executable, target: str, statics=(), weights=()):
        import tvm
        from tvm import relax

        self._frozen = frozen
        self.fallbacks = fallbacks
        self.target = target
        self._executable = executable
        self._vm = relax.VirtualMachine(_loaded(executable), tvm.cpu())
        # The program's weights (lift_weights): the VM's entries take them as one last argument.
        self._weights = list(weights)
        self._weights_arg = _weights_argument(self._weights)
        # Calls whose `None` dims fit bounded_plan.UPPER_BOUND run the entry planned for them.
        self._bounded = _has_function(self._vm, bounded_plan.BOUNDED_ENTRY)
        # Calls whose input shapes are exactly a static program's run it instead of the general one.
        self.statics = {p.shapes: p for p in statics}
        for program in statics:
            program.vm = relax.VirtualMachine(_loaded(program.executable), tvm.cpu())
            program.weights_arg = _weights_argument(program.weights)
        self._relax = self.tvm_target = None  # the TVM IR and target, where compiled here (to rebuild)
        self.tuned_kernels = 0  # kernels of the general program with a tuned schedule
        self.precision = PrecisionReport()  # what precision="bf16" moved to bf16 units, where compiled here
        self._lock = threading.Lock()  # one VM: its registers and memory plan are not per thread
        self._structure = frozen.structured_outputs
        self._ops = {n.name: n.op for n in frozen.graph_def.node}
        self.body_offloaded = 0  # compute nodes of loop bodies in TVM (known where compiled)
        # Bodies rewritten with tftvm ops are functions TF's eager runtime must know to call.
        register_functions(list(frozen.graph_def.library.function))
        self.calls = 0
        self.seconds = 0.0
        # The safety net (keep_faster): a verdict (safety_net.Timing) per set of input shapes,
        # measured at compile time for `None` dims at 1 (`timing`), at other shapes on the
        # user's first calls with them (_Trial).
        self.timing = None
        self.timings: dict[tuple, safety_net.Timing] = {}
        self._trials: dict[tuple, _Trial] = {}
        self._trials_only = False  # on, with no verdict: random inputs are no valid inputs of the model
        self._tf_graph = None  # the frozen graph as a tf.function, made when first needed

    @property
    def input_specs(self) -> list:
        """A TensorSpec per flat input, as the model was compiled for them."""
        import tensorflow as tf

        return [tf.TensorSpec(t.shape, t.dtype) for t in self._frozen.inputs]

    def keep_faster(self) -> None:
        """The safety net: time the model's VM against its frozen graph in TF (`None` dims at
        1) and run TF's at those shapes if it is faster; calls with other shapes are timed
        on their first calls (see _Trial) and run the faster side from then on."""
        import tensorflow as tf

        inputs = safety_net.random_inputs(self.input_specs)
        self._trials = {}
        try:
            self.timing = safety_net.time_calls(self._run_vm, self._tf_function(), inputs)
        except tf.errors.OpError as err:
            if not _raises(self._tf_function(), inputs):
                raise  # the VM fails where TF does not: that is the news
            # A model whose inputs must mean something (generate()'s padding mask, which it
            # reads positions from): TF itself raises on random ones. The first calls of each
            # input shape decide instead.
            log.info("whole model: not timed at compile time, TF raises on random inputs (%s); the first calls "
                     "of each input shape decide where it runs", str(err).strip().splitlines()[0])  # fmt: skip
            self.timing, self.timings, self._trials_only = None, {}, True
        else:
            self.timings = {_shapes_of(inputs): self.timing}
            log.info("whole model: %s; runs in %s", self.timing, "TF, which is faster" if self.timing.tf_faster else "TVM")
        self.calls, self.seconds = 0, 0.0  # the report counts the user's calls, not these
        for fb in self.fallbacks:
            fb.calls, fb.seconds = 0, 0.0
        for program in self.statics.values():
            program.calls = 0

    def _tf_function(self):
        """The frozen graph as a tf.function of the model's flat inputs (its weights captured:
        the tensors the VM reads too, not copies in the function's graph)."""
        import tensorflow as tf

        if self._tf_graph is None:
            frozen = self._frozen
            names, weights = list(frozen.weight_values), list(frozen.weight_values.values())
            run = graph_runner(frozen.graph_def, [t.name for t in frozen.inputs] + names,
                               [t.name for t in frozen.outputs])  # fmt: skip
            # tf.identity captures each weight (a by-reference input of the function, no copy)
            self._tf_graph = tf.function(lambda *inputs: run(*inputs, *map(tf.identity, weights)),
                                         input_signature=self.input_specs, autograph=False)  # fmt: skip
        return self._tf_graph

    def __call__(self, *inputs):
        """The model on `inputs`, structured as the signature is (a list of two for a
        two-input Keras model called with [x1, x2], say)."""
        import tensorflow as tf

        flat = tf.nest.flatten(list(inputs))
        if len(flat) != len(self._frozen.inputs):
            raise TypeError(f"the model takes {len(self._frozen.inputs)} inputs, got {len(flat)}")
        checked = [_checked(i, x, t) for i, (x, t) in enumerate(zip(flat, self._frozen.inputs))]
        shapes = _shapes_of(checked)
        in_tf, trial = self._where(shapes)
        start = time.perf_counter()
        outputs = self._tf_function()(*checked) if in_tf else self._run_vm(*checked, shapes=shapes)
        if trial is not None:  # both return finished work: the VM and an eager TF call on CPU are synchronous
            self._record(shapes, trial, in_tf, time.perf_counter() - start)
        return tf.nest.pack_sequence_as(self._structure, list(outputs))

    def _where(self, shapes) -> tuple[bool, _Trial | None]:
        """Whether a call with input `shapes` runs in TF, and the trial it is part of (None
        where there is a verdict, or no safety net)."""
        if self.timing is None and not self._trials_only:
            return False, None
        with self._lock:
            verdict = self.timings.get(shapes)
            if verdict is not None:
                return verdict.tf_faster, None
            trial = self._trials.setdefault(shapes, _Trial())
            return trial.next_in_tf(), trial

    def _record(self, shapes, trial, in_tf: bool, seconds: float) -> None:
        with self._lock:
            verdict = trial.record(in_tf, seconds)
            if verdict is not None and shapes not in self.timings:
                self.timings[shapes] = verdict
                self._trials.pop(shapes, None)
                log.info("whole model at input shapes %s: %s; runs in %s", list(shapes), verdict,
                         "TF, which is faster" if verdict.tf_faster else "TVM")  # fmt: skip

    def _run_vm(self, *checked, shapes=None):
        """The outputs (TF tensors, flat) of the VM on checked TF tensors (of input `shapes`, where known)."""
        args = [to_tvm(x) for x in checked]
        shapes = _shapes_of(checked) if shapes is None else shapes
        vm, entry, weights = self._vm, "main", self._weights_arg
        if shapes in self.statics:
            vm, weights = self.statics[shapes].vm, self.statics[shapes].weights_arg
        elif self._bounded and bounded_plan.fits(shapes, self.input_specs):
            entry = bounded_plan.BOUNDED_ENTRY
        with self._lock:
            start = time.perf_counter()
            try:
                result = vm_threads.call(vm[entry], *args, *([] if weights is None else [weights]))
            except IndexError as err:  # a kernel's input check (a bad index, an empty axis): TF's error for it
                import tensorflow as tf

                raise tf.errors.InvalidArgumentError(None, None, str(err)) from None
            except Exception as err:
                errors = [fb.error for fb in self.fallbacks if fb.error is not None]
                for fb in self.fallbacks:
                    fb.error = None
                if errors:  # a node run by TF raised (on an input TF checks): TF's own error
                    raise errors[-1] from None
                if "match_cast error" not in str(err):
                    raise
                # Inputs with a None dim each that the model combines (a + b, x.W + h.U) were
                # compiled with one dim for both; the VM checks it on entry.
                raise ValueError("the inputs' shapes do not fit one another: a dim the model "
                                 f"shares between inputs (their batch, say) differs. TVM: {err}") from None
            self.seconds += time.perf_counter() - start
            self.calls += 1
            if shapes in self.statics:
                self.statics[shapes].calls += 1
        return [to_tf(r) for r in (list(result) if len(self._frozen.outputs) > 1 else [result])]

    def export(self, path) -> Path:
        """Write the model to directory `path`: the TVM library, the graph its TF ops come
        from (its weights Consts there), the kernels' packed layouts of weights (WEIGHTS) and
        a manifest. `tftvm.load_model(path)` loads it in any process."""
        import tensorflow as tf

        import tvm

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self._executable.export_library(str(path / LIBRARY))
        (path / GRAPH).write_bytes(with_constants(self._frozen.graph_def, self._frozen.weight_values).SerializeToString())
        saved = {}  # lifted weights that are no weight of the graph (packed layouts, folded scales)
        manifest = {
            "format": FORMAT,
            "library_sha256": _sha256(path / LIBRARY),
            "inputs": [t.name for t in self._frozen.inputs],
            "outputs": [t.name for t in self._frozen.outputs],
            "structure": tf.nest.map_structure(lambda _: 0, self._structure),
            "fallbacks": [{k: getattr(fb, k) for k in ("node", "op", "reason", "packed_name", "feeds", "fetches", "nodes")}
                          for fb in self.fallbacks],  # fmt: skip
            "target": self.target,
            # The safety net's verdict travels with the model: TF's graph is in the export.
            "timing": None if self.timing is None else {"tvm_seconds": self.timing.tvm_seconds,
                                                        "tf_seconds": self.timing.tf_seconds},
            "timings": [{"shapes": shapes, "tvm_seconds": t.tvm_seconds, "tf_seconds": t.tf_seconds}
                        for shapes, t in self.timings.items()],
            "tuned_kernels": self.tuned_kernels,
            "weights": self._weight_entries(self._weights, "main", saved),
            "static": [],
        }
        for i, program in enumerate(self.statics.values()):
            library = f"model_static{i}.so"
            program.executable.export_library(str(path / library))
            manifest["static"].append({"shapes": program.shapes, "library": library, "kernels": program.kernels,
                                       "tuned": program.tuned, "library_sha256": _sha256(path / library),
                                       "weights": self._weight_entries(program.weights, f"static{i}", saved)})  # fmt: skip
        if saved:
            tvm.runtime.save_param_dict_to_file(saved, str(path / WEIGHTS))
            manifest["weights_sha256"] = _sha256(path / WEIGHTS)
        (path / MANIFEST).write_text(json.dumps(manifest, indent=1))
        return path

    def _weight_entries(self, weights: list, program: str, saved: dict) -> list:
        """The manifest's entry for each of a program's lifted `weights`: the graph's weight it
        is (by tensor name), or its key in `saved`, the weights file's arrays."""
        graph_weights = {to_tvm(v).data_ptr(): name for name, v in self._frozen.weight_values.items()}
        entries = []
        for i, w in enumerate(weights):
            name = graph_weights.get(w.data_ptr())
            if name is not None and tuple(w.shape) == tuple(self._frozen.weight_values[name].shape):
                entries.append({"tensor": name})
            else:
                saved[f"{program}.{i}"] = w
                entries.append({"saved": f"{program}.{i}"})
        return entries

    def summary(self) -> ConversionReport:
        """What ran where, as data: compute nodes, how many ran in TVM, each TF op and why."""
        in_tf = [OpInTF(name, self._ops[name], fb.reason) for fb in self.fallbacks for name in fb.nodes
                 if self._ops[name] not in NOT_COMPUTE]  # fmt: skip
        if self.timing is not None and self.timing.tf_faster:
            why = f"TF runs the whole model faster ({self.timing})"
            in_tf = [OpInTF(name, op, why) for name, op in self._ops.items() if op not in NOT_COMPUTE]
            return ConversionReport(len(in_tf), 0, in_tf_with_bodies(self._frozen.graph_def, in_tf), [])
        compute = sum(1 for op in self._ops.values() if op not in NOT_COMPUTE)
        everything = in_tf_with_bodies(self._frozen.graph_def, in_tf)
        extra = self.body_offloaded
        return ConversionReport(compute + len(everything) - len(in_tf) + extra, compute - len(in_tf) + extra,
                                everything, [])  # fmt: skip

    def report(self) -> str:
        summary = self.summary()
        lines = [f"compute nodes: {summary.compute_nodes}, in TVM: {summary.offloaded} "
                 f"({100 * summary.fraction:.1f}%), in TF: {len(summary.in_tf)}; "
                 f"{self.calls} calls, {1e3 * self.seconds:.2f} ms in all"]  # fmt: skip
        if self.precision.precision != "f32":
            lines.append(self.precision.text())
        if self.tuned_kernels:
            lines.append(f"tuned kernels: {self.tuned_kernels}")
        for program in self.statics.values():
            lines.append(f"static program for input shapes {list(program.shapes)}: {program.kernels} kernels, "
                         f"{program.tuned} tuned; ran {program.calls} of the calls")  # fmt: skip
        for shapes, timing in self.timings.items():
            where = "TF, which is faster" if timing.tf_faster else "TVM"
            lines.append(f"whole model at input shapes {list(shapes)}: {timing}; runs in {where}")
        for shapes in self._trials:
            lines.append(f"whole model at input shapes {list(shapes)}: being timed on its first calls")
        for fb in self.fallbacks:
            share = 100.0 * fb.seconds / self.seconds if self.seconds else 0.0
            where = fb.node if len(fb.nodes) == 1 else f"{len(fb.nodes)} nodes from {fb.node}"
            lines.append(f"in TF: {fb.op} ({where}): {fb.reason}; ran {fb.calls} times, "
                         f"{1e3 * fb.seconds:.2f} ms, {share:.1f}% of the time")  # fmt: skip
        return "\n".join(lines)

    def rebuilt(self, *, database=None, specialize=None) -> CompiledModel:
        """The model compiled again from its TVM IR: each kernel with a record in `database`
        (default $TFTVM_TUNING_DB) gets its tuned schedule, and `specialize` (as in
        `compile_model`) adds static programs to the ones it has. The general program of a
        model with `None` dims is kept as it is: its kernels are symbolic, and records are
        for static shapes."""
        self._need_ir("rebuilt")
        specialize = [*self.statics, *(specialize or ())]
        symbolic = not all(t.shape.is_fully_defined() for t in self._frozen.inputs)
        keep = (self._executable, self.tuned_kernels, self._weights) if symbolic else None
        rebuilt = _compiled(self._frozen, self.fallbacks, self._relax, self.tvm_target, database=database,
                            specialize=specialize, main=keep)  # fmt: skip
        rebuilt.body_offloaded = self.body_offloaded
        if self.timing is not None:  # the safety net was on: tuned kernels may change its verdict
            rebuilt.keep_faster()
        return rebuilt

    def tuning(self, shapes=None):
        """What `tftvm.tune` tunes (tunable.py): the kernels of the model compiled for each set
        of input `shapes` (default: each `None` dim 1, what the safety net measures)."""
        from . import tunable

        if shapes is None:
            shapes = [[tuple(1 if d is None else d for d in spec.shape.as_list()) for spec in self.input_specs]]
        kernels = [(name, func, None) for name, func in self.static_kernels(shapes)]
        rebuild = lambda database: self.rebuilt(database=database, specialize=shapes)  # noqa: E731
        return tunable.Tuning(kernels, self.tvm_target, rebuild, self)

    def static_kernels(self, shapes) -> list:
        """(name, PrimFunc) of each fused kernel with static shapes, of the model compiled for
        each of `shapes` (as `specialize` takes them): what `tftvm.tune` tunes."""
        from tvm import tirx

        from .graph.lowering.program import fuse

        self._need_ir("tuned")
        kernels = []
        for item in shapes:
            mod = fuse(_bound(self._relax, _input_shapes(item, self._frozen.inputs, "shapes")))
            kernels += [(gv.name_hint, f) for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)]
        return kernels

    def _need_ir(self, what: str) -> None:
        if self._relax is None:
            raise TypeError(f"this model was loaded from an export, which keeps no TVM IR, so it cannot be {what}: "
                            "compile_model it again")  # fmt: skip


TRIAL_SAMPLES = 3  # timed calls per side before a verdict at new input shapes


def _raises(fn, inputs) -> bool:
    """Whether TF raises calling `fn` on `inputs`."""
    import tensorflow as tf

    try:
        fn(*inputs)
    except tf.errors.OpError:
        return True
    return False


class _Trial:
    """The first calls at input shapes the safety net has not measured, run in pairs by
    TVM and TF in turn (TVM, TVM, TF, TF, ...; the user gets each call's result, the same
    to float rounding): the second call of each pair is timed (the first warms up and lets
    the other side's spinning worker threads settle), and after TRIAL_SAMPLES of each the
    medians give the verdict. The pattern of cuDNN's benchmark mode, at the model's level:
    a None batch measured at 1 says nothing of batch 8 (Xception at 224: TVM faster at 1,
    TF at 8)."""

    def __init__(self):
        self.calls = 0
        self.samples: tuple[list, list] = ([], [])  # TVM's, TF's seconds

    def next_in_tf(self) -> bool:
        in_tf = (self.calls // 2) % 2 == 1
        self.calls += 1
        return in_tf

    def record(self, in_tf: bool, seconds: float) -> safety_net.Timing | None:
        """Note a call's time (every second one of a side's pair counts); the verdict once both have enough."""
        side = self.samples[int(in_tf)]
        side.append(seconds)
        if min(len(s) for s in self.samples) < 2 * TRIAL_SAMPLES:
            return None
        tvm_s, tf_s = (float(np.median(s[1::2])) for s in self.samples)
        return safety_net.Timing(tvm_s, tf_s)


def _has_function(vm, name: str) -> bool:
    try:
        vm[name]
    except Exception:  # the VM raises TVM's own error type for a missing function
        return False
    return True


def _shapes_of(tensors) -> tuple:
    return tuple(tuple(int(d) for d in x.shape) for x in tensors)


def _checked(index: int, value, spec):
    """Input `index` as a TF tensor of the signature's dtype and shape, or a clear error."""
    import tensorflow as tf

    dtype = getattr(value, "dtype", None)
    if dtype is not None and tf.as_dtype(dtype) != spec.dtype:
        raise TypeError(f"input {index} must have dtype {spec.dtype.name}, got {tf.as_dtype(dtype).name}")
    tensor = tf.convert_to_tensor(value, dtype=spec.dtype)
    if not spec.shape.is_compatible_with(tensor.shape):
        raise ValueError(f"input {index} must have shape {spec.shape}, got {tensor.shape}")
    return tensor


def compile_model(model, input_signature, *, fallback: str = "tf", target=None, deny=None,
                  keep_faster=None, database=None, specialize=None, precision: str = "f32") -> CompiledModel:  # fmt: skip
    """Compile a whole TF model (Keras model, tf.function, callable) into one Relax VM program.

    `input_signature`: TensorSpecs, nested as the model takes its inputs (e.g. `[[s1, s2]]`
    for a two-input Keras model); `None` dims are compiled once, symbolically.
    `fallback="tf"`: ops without a TVM conversion run in TF, called from the VM;
    `fallback="error"`: such ops raise `Unsupported` (tftvm.graph.Unsupported), naming them.
    `deny`: TF op types to keep in TF although they convert.
    `target`: a TVM target dict (default: this CPU).
    `keep_faster` (default True, $TFTVM_KEEP_FASTER=0 for False): time the compiled model
    against its frozen graph in TF and run TF's where it is faster (`report()` says so).
    `database`: a MetaSchedule database (default $TFTVM_TUNING_DB); kernels with a record
    there get the tuned schedule (`tftvm.tune(compiled, ...)` writes them).
    `specialize`: input shapes to compile a static program for, besides the general one:
    a list whose items each give one shape per flat input (for a one-input model, just
    its shape), e.g. `[(1, 224, 224, 3)]`; calls with exactly those shapes run it. Static
    kernels are faster than symbolic ones, and only they can be tuned.
    `precision="bf16"`: matmuls and convs take bf16 inputs with f32 accumulation, on the
    CPU's AMX tiles or else its AVX512-BF16 instructions where it has them (else they stay
    f32); `report()` says which ran.
    """
    from .kernel import resolve_target

    if fallback not in ("tf", "error"):
        raise ValueError(f"fallback must be 'tf' or 'error', got {fallback!r}")
    check(precision)
    deny = frozenset(deny or ())
    frozen = freeze(model, input_signature, weights_apart=True)  # held once, read by TF and the VM alike
    # Loop and branch bodies get their compute as tftvm ops; the loops run in TF, called by the VM.
    # (A body's weights are constants: what is computed from them alone runs once, memoized.)
    frozen, bodies = control_flow.optimize_bodies(
        frozen, lambda body: offload(body, target=target, deny=deny, memoize_weights=True))
    if fallback == "error":
        _, needed = whole.to_relax(frozen, lambda fb: None, deny)
        if needed:
            raise Unsupported("fallback='error', and these ops have no TVM conversion: "
                              + "; ".join(f"{fb.op} ({fb.node}): {fb.reason}" for fb in needed))  # fmt: skip
    mod, fallbacks = whole.to_relax(frozen, _register_tf_runner(frozen), deny)
    precision_report = PrecisionReport()
    # Batch norms' scales that TF's freezing left after a conv (a depthwise conv's) folded into
    # its weights, as optimize's clusters have them: no multiply per output in the conv's epilogue.
    mod = fold_scales.fold(mod, [])
    if precision == "bf16":
        mod = to_bf16(fold_strides.fold(mod), resolve_target(target), precision_report)
    compiled = _compiled(frozen, fallbacks, mod, resolve_target(target), database=database, specialize=specialize)
    compiled.precision = precision_report
    compiled.body_offloaded = sum(b.offloaded for b in control_flow.flatten(bodies))
    if safety_net.enabled(keep_faster):
        compiled.keep_faster()
    return compiled


def load_model(path) -> CompiledModel:
    """A model written by `CompiledModel.export`; its library is checked against the manifest."""
    import tensorflow as tf
    import tvm

    path = Path(path)
    manifest = json.loads((path / MANIFEST).read_text())
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{path / MANIFEST} has format {manifest.get('format')}, expected {FORMAT}")
    library = path / LIBRARY
    if _sha256(library) != manifest["library_sha256"]:
        raise ValueError(f"{library} does not match the SHA-256 in its manifest; refusing to load it")
    # The weights split off before a tf.Graph holds them: held once, read by TF and the VM.
    graph_def, weights = split(tf.compat.v1.GraphDef.FromString((path / GRAPH).read_bytes()))
    weight_values = values(weights)
    del weights
    graph = imported(graph_def)
    frozen = FrozenGraph(graph, graph_def, [graph.get_tensor_by_name(t) for t in manifest["inputs"]],
                         [graph.get_tensor_by_name(t) for t in manifest["outputs"]], manifest["structure"],
                         weight_values=weight_values)  # fmt: skip
    saved = {}
    if manifest.get("weights_sha256"):
        if _sha256(path / WEIGHTS) != manifest["weights_sha256"]:
            raise ValueError(f"{path / WEIGHTS} does not match the SHA-256 in its manifest; refusing to load it")
        saved = tvm.runtime.load_param_dict_from_file(str(path / WEIGHTS))

    def weights(entries) -> list:
        return [to_tvm(frozen.weight_values[e["tensor"]]) if "tensor" in e else saved[e["saved"]] for e in entries]

    fallbacks = [whole.Fallback(**fb) for fb in manifest["fallbacks"]]
    register = _register_tf_runner(frozen)
    for fb in fallbacks:
        register(fb)
    statics = []
    for entry in manifest.get("static", []):
        library = path / entry["library"]
        if _sha256(library) != entry["library_sha256"]:
            raise ValueError(f"{library} does not match the SHA-256 in its manifest; refusing to load it")
        shapes = tuple(tuple(s) for s in entry["shapes"])
        statics.append(StaticProgram(shapes, vm_threads.load(library), entry["kernels"], entry["tuned"],
                                     weights(entry.get("weights", []))))  # fmt: skip
    compiled = CompiledModel(frozen, fallbacks, vm_threads.load(path / LIBRARY), manifest["target"], statics,
                             weights(manifest.get("weights", [])))  # fmt: skip
    compiled.tuned_kernels = manifest.get("tuned_kernels", 0)
    if manifest.get("timing"):
        compiled.timing = safety_net.Timing(manifest["timing"]["tvm_seconds"], manifest["timing"]["tf_seconds"], cached=True)
        compiled.timings = {tuple(tuple(s) for s in t["shapes"]): safety_net.Timing(t["tvm_seconds"], t["tf_seconds"],
                                                                                 cached=True)
                            for t in manifest.get("timings", [])}  # fmt: skip
    return compiled


def _compiled(frozen, fallbacks, mod, target, *, database, specialize, main=None) -> CompiledModel:
    """The CompiledModel of Relax module `mod`: its general program (`main`: an executable
    and its tuned-kernel count, to reuse one) and a static program per `specialize` item."""
    shapes = list(dict.fromkeys(_input_shapes(item, frozen.inputs, "specialize") for item in specialize or ()))
    if all(t.shape.is_fully_defined() for t in frozen.inputs):
        shapes = []  # the general program is already the static one
    if main is None:
        executable, _, tuned, weights = _build(mod, target, database, "the model")
    else:
        executable, tuned, weights = main
    statics = []
    for s in shapes:
        static, kernels, static_tuned, static_weights = _build(_bound(mod, s), target, database,
                                                               f"input shapes {list(s)}")  # fmt: skip
        statics.append(StaticProgram(s, static, kernels, static_tuned, static_weights))
    compiled = CompiledModel(frozen, fallbacks, executable, str(target), statics, weights)
    compiled._relax, compiled.tvm_target, compiled.tuned_kernels = mod, target, tuned
    return compiled


def _build(mod, target, database, what: str) -> tuple:
    """(executable, kernels, tuned kernels, weights) of Relax module `mod`: its weights (what
    lift_weights lifts) are not in the executable, the VM's entries take them."""
    import tvm

    start = time.perf_counter()
    scheduled, kernels, tuned = _fused_and_scheduled(mod, target, database)
    scheduled, weights = lift_weights.lift(scheduled, WEIGHT_BYTES)
    # fuse() rewrote the reshape kernels already (program.py: as TVM's pass would, where it can)
    with pass_context_like_current(disabled_pass=["RewriteDataflowReshape"]):
        executable = tvm.compile(scheduled, target=target)
    log.info("compiled %s (%d kernels, %d tuned) in %.2f s", what, kernels, tuned, time.perf_counter() - start)
    return executable, kernels, tuned, weights


def _input_shapes(item, inputs, argument: str) -> tuple:
    """`item` (one shape per flat input, or a one-input model's shape) checked against `inputs`."""
    items = [item] if len(inputs) == 1 and _is_shape(item) else item
    if not isinstance(items, (list, tuple)) or len(items) != len(inputs) or not all(_is_shape(s) for s in items):
        raise ValueError(f"{argument}: each item must give one shape (a tuple of ints >= 0) per model input "
                         f"({len(inputs)}), got {item!r}")  # fmt: skip
    for i, (shape, t) in enumerate(zip(items, inputs)):
        if not t.shape.is_compatible_with(shape):
            raise ValueError(f"{argument}: shape {tuple(shape)} does not fit input {i}, which has shape {t.shape}")
    return tuple(tuple(int(d) for d in s) for s in items)


def _is_shape(s) -> bool:
    return isinstance(s, (list, tuple)) and all(
        isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 0 for d in s)


def _bound(mod, shapes: tuple):
    """`mod` with the symbolic dims of its inputs bound to `shapes`."""
    from tvm import relax, tirx

    binding = {}
    for i, (param, shape) in enumerate(zip(mod["main"].params, shapes)):
        for d, (dim, value) in enumerate(zip(param.ty.shape.values, shape)):
            if not isinstance(dim, tirx.Var):
                continue
            if binding.setdefault(dim.name, (value, i, d))[0] != value:
                _, j, e = binding[dim.name]
                raise ValueError(f"specialize: dim {d} of input {i} is {value}, but the model shares it with dim {e} "
                                 f"of input {j}, which is {binding[dim.name][0]}")  # fmt: skip
    return relax.transform.BindSymbolicVars({name: v for name, (v, _, _) in binding.items()})(mod)


def _fused_and_scheduled(mod, target, database=None) -> tuple:
    """(module, kernels, tuned kernels): Relax's fusion, then for every fused kernel its tuned
    schedule where `database` has a record, else tftvm's default CPU schedule."""
    import tvm
    from tvm import tirx

    from .graph.lowering import empty_constants
    from .graph.lowering.program import fuse
    from .records import tuned_schedules
    from .schedule import default_cpu_schedule
    from .signature import symbolic_reason

    mod = empty_constants.allocate(fuse(mod))
    kernels = {gv: f for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)}
    static = {gv: f for gv, f in kernels.items() if symbolic_reason(f) is None}
    tuned = {gv: sch.mod["main"].with_attr("global_symbol", gv.name_hint)
             for gv, sch in tuned_schedules(static, target, database).items()}  # fmt: skip
    rest = [gv for gv in kernels if gv not in tuned]
    scheduled = default_cpu_schedule(tvm.IRModule({gv.name_hint: kernels[gv] for gv in rest})) if rest else {}
    for gv in kernels:
        mod.update_func(gv, tuned[gv] if gv in tuned else scheduled[gv.name_hint])
    mod = bounded_plan.with_bounded_entry(mod)
    # TVM 0.27's LLVM codegen declares every function before it emits any, and emits them all
    # with the no-alias setting of the last one declared (by symbol). With a None dim that is
    # the VM's shape function, which has none: every kernel would lose `noalias`, and with it
    # most of its speed (benchmarks/HISTORY.md). This empty no-alias function sorts last.
    last = tirx.PrimFunc([], tirx.Evaluate(tirx.IntImm("int32", 0)))
    mod[NOALIAS_LAST] = last.with_attrs({"global_symbol": NOALIAS_LAST, "tirx.noalias": True})
    return mod, len(kernels), len(tuned)


def _weights_argument(weights: list):
    """`weights` as the one tuple argument the VM's entries take last; None where there are none."""
    import tvm_ffi

    return tvm_ffi.convert(list(weights)) if weights else None


def _loaded(executable):
    """What the VM runs: `tvm.compile`'s executable loaded as a library of its own (its loops
    on tftvm's launcher, vm_threads.py), a library load_model loaded as it is."""
    import tvm

    return vm_threads.loaded(executable) if isinstance(executable, tvm.runtime.Executable) else executable


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _register_tf_runner(frozen):
    """The function that makes one TF node (or island) callable from the VM, by a global name.

    A single node runs as one eager TF op (TF's own op dispatch); an
    island, or a node whose attributes cannot be passed eagerly, runs as the frozen
    graph pruned to it.
    """
    import tensorflow as tf
    import tvm_ffi

    graph = frozen.graph

    def register(fb: whole.Fallback) -> None:
        dtypes = [graph.get_tensor_by_name(f).dtype for f in fb.feeds]
        run_op = None
        if len(fb.nodes) == 1:
            op = graph.get_operation_by_name(fb.node)
            if len(fb.feeds) == sum(1 for i in op.node_def.input if not i.startswith("^")):
                run_op = _eager_op(op, len(op.outputs), [op.outputs.index(graph.get_tensor_by_name(f))
                                                         for f in fb.fetches])  # fmt: skip
        run_op = run_op or _pruned(frozen, fb.feeds, fb.fetches)

        def run(*args):
            start = time.perf_counter()
            tensors = [to_tf(a) for a in args]
            tensors = [t if t.dtype == d else tf.cast(t, d) for t, d in zip(tensors, dtypes)]
            try:
                results = run_op(tensors)
            except tf.errors.OpError as err:  # the VM raises its own error: the model call raises this one
                fb.error = err
                raise
            outs = unaliased([to_tvm(y) for y in results], args)
            fb.calls += 1
            fb.seconds += time.perf_counter() - start
            return outs[0] if len(outs) == 1 else outs

        tvm_ffi.register_global_func(fb.packed_name, run, override=True)

    return register


def unaliased(outputs: list, inputs: list) -> list:
    """`outputs`, each copied if its memory overlaps an input's or an earlier output's.

    TF ops may hand back their input's buffer (Identity, IdentityN, Reshape) or a view
    of it (Split, Unpack, StridedSlice). The VM's memory planner takes what a packed
    call returns as new memory, and reuses an argument's storage once the argument is
    dead: an output that aliases it would be overwritten while still in use.
    """
    seen = [_span(t) for t in inputs]
    fresh = []
    for t in outputs:
        span = _span(t)
        if span[1] > span[0] and any(span[0] < end and begin < span[1] for begin, end in seen):
            t = _copy(t)
            span = _span(t)
        seen.append(span)
        fresh.append(t)
    return fresh


def _span(t) -> tuple[int, int]:
    """The bytes a TVM tensor covers, [begin, end); (0, 0) for what is no tensor."""
    if not hasattr(t, "data_ptr"):
        return (0, 0)
    begin = t.data_ptr()
    return begin, begin + t.numel() * ((t.dtype.bits * t.dtype.lanes + 7) // 8)


def _copy(t):
    import tvm

    copy = tvm.runtime.empty(t.shape, t.dtype, t.device)
    copy.copyfrom(t)
    return copy


def _eager_op(op, num_outputs: int, picked: list[int]):
    """`op` as an eager call of its TF op type with its attributes, giving back its outputs
    `picked`; None if the attributes do not translate."""
    import tensorflow as tf
    from tensorflow.python.eager import context, execute

    attrs = []
    for name in op.node_def.attr:
        if name.startswith("_"):
            continue  # graph-only annotations
        value = op.get_attr(name)
        if isinstance(value, tf.DType):
            value = value.as_datatype_enum
        elif isinstance(value, list) and value and isinstance(value[0], tf.DType):
            value = [v.as_datatype_enum for v in value]
        elif not isinstance(value, (bool, int, float, str, bytes, list)):
            return None  # shapes, tensors, functions: the pruned graph handles those
        attrs += [name, value]
    op_type, attrs = op.type, tuple(attrs)

    def run(tensors):
        outputs = execute.execute(op_type, num_outputs, tensors, attrs, context.context())
        return [outputs[i] for i in picked]

    return run


def _pruned(frozen, feeds: list[str], fetches: list[str]):
    import tensorflow as tf

    part, placeholders = cut_out(frozen.graph, frozen.graph_def, feeds, fetches)
    fed = dict(zip(map(tensor_name, feeds), placeholders))
    fetches = [fed.get(tensor_name(f), f) for f in fetches]
    graph_def = with_new_function_names(part)  # its loop bodies may be registered already
    wrapped = tf.compat.v1.wrap_function(lambda: tf.graph_util.import_graph_def(graph_def, name=""), [])
    graph = wrapped.graph
    feeds = [graph.get_tensor_by_name(f + ":0") for f in placeholders]
    # A positional signature: without it every call first fails TF's structured binding,
    # whose error message prints each input's values (more than an LSTM's loop step costs).
    signature = [tf.TensorSpec(f.shape, f.dtype) for f in feeds]
    pruned = wrapped.prune(feeds, [graph.get_tensor_by_name(f) for f in fetches], input_signature=(signature, {}))
    return lambda tensors: pruned(*tensors)
