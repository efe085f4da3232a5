"""The reverse bridge: a whole TF model on TVM's Relax VM, TF only for what TVM lacks.

`tftvm.optimize` keeps the model in TF and moves clusters to TVM; `compile_model`
does the opposite split: one Relax program (one VM, one memory plan) runs the
model, and each op the converter table cannot take is a call from the VM back
into TF, zero copy both ways (DLPack).
"""
from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from pathlib import Path

from .graph import whole
from .graph.convert import Unsupported
from .graph.freeze import FrozenGraph, freeze
from .graph.mark import NOT_COMPUTE

log = logging.getLogger(__name__)

FORMAT = 1
LIBRARY, GRAPH, MANIFEST = "model.so", "graph.pb", "tftvm_model.json"


class CompiledModel:
    """Call it with NumPy arrays or TF tensors; `report()` says what ran in TF and for how long."""

    def __init__(self, frozen, fallbacks, executable, target: str):
        import tvm
        from tvm import relax

        self._frozen = frozen
        self.fallbacks = fallbacks
        self.target = target
        self._executable = executable
        self._vm = relax.VirtualMachine(executable, tvm.cpu())
        self._lock = threading.Lock()  # one VM: its registers and memory plan are not per thread
        self._structure = frozen.structured_outputs
        self.calls = 0
        self.seconds = 0.0

    def __call__(self, *inputs):
        import tensorflow as tf

        if len(inputs) != len(self._frozen.inputs):
            raise TypeError(f"the model takes {len(self._frozen.inputs)} inputs, got {len(inputs)}")
        args = [_to_tvm(_checked(i, x, t)) for i, (x, t) in enumerate(zip(inputs, self._frozen.inputs))]
        with self._lock:
            start = time.perf_counter()
            result = self._vm["main"](*args)
            self.seconds += time.perf_counter() - start
            self.calls += 1
        flat = list(result) if len(self._frozen.outputs) > 1 else [result]
        outputs = [_to_tf(r) for r in flat]
        return tf.nest.pack_sequence_as(self._structure, outputs)

    def export(self, path) -> Path:
        """Write the model to directory `path`: the TVM library, the graph its TF ops come
        from, and a manifest. `tftvm.load_model(path)` loads it in any process."""
        import tensorflow as tf

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self._executable.export_library(str(path / LIBRARY))
        (path / GRAPH).write_bytes(self._frozen.graph_def.SerializeToString())
        manifest = {
            "format": FORMAT,
            "library_sha256": hashlib.sha256((path / LIBRARY).read_bytes()).hexdigest(),
            "inputs": [t.name for t in self._frozen.inputs],
            "outputs": [t.name for t in self._frozen.outputs],
            "structure": tf.nest.map_structure(lambda _: 0, self._structure),
            "fallbacks": [{k: getattr(fb, k) for k in ("node", "op", "reason", "packed_name", "feeds", "fetches")}
                          for fb in self.fallbacks],  # fmt: skip
            "target": self.target,
        }
        (path / MANIFEST).write_text(json.dumps(manifest, indent=1))
        return path

    def report(self) -> str:
        compute = [n for n in self._frozen.graph_def.node if n.op not in NOT_COMPUTE]
        lines = [f"compute nodes: {len(compute)}, in TVM: {len(compute) - len(self.fallbacks)}, "
                 f"in TF: {len(self.fallbacks)}; {self.calls} calls, {1e3 * self.seconds:.2f} ms in all"]  # fmt: skip
        for fb in self.fallbacks:
            share = 100.0 * fb.seconds / self.seconds if self.seconds else 0.0
            lines.append(f"in TF: {fb.op} ({fb.node}): {fb.reason}; ran {fb.calls} times, "
                         f"{1e3 * fb.seconds:.2f} ms, {share:.1f}% of the time")  # fmt: skip
        return "\n".join(lines)


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


def compile_model(model, input_signature, *, fallback: str = "tf", target=None) -> CompiledModel:
    """Compile a whole TF model (Keras model, tf.function, callable) into one Relax VM program.

    `fallback="tf"`: ops without a TVM conversion run in TF, called from the VM;
    `fallback="error"`: such ops raise `Unsupported` (tftvm.graph.convert), naming them.
    `target`: a TVM target dict (default: this CPU).
    """
    import tvm

    from .kernel import resolve_target

    if fallback not in ("tf", "error"):
        raise ValueError(f"fallback must be 'tf' or 'error', got {fallback!r}")
    frozen = freeze(model, input_signature)
    if fallback == "error":
        _, needed = whole.to_relax(frozen, lambda fb: None)
        if needed:
            raise Unsupported("fallback='error', and these ops have no TVM conversion: "
                              + "; ".join(f"{fb.op} ({fb.node}): {fb.reason}" for fb in needed))  # fmt: skip
    mod, fallbacks = whole.to_relax(frozen, _register_tf_runner(frozen))
    target = resolve_target(target)
    start = time.perf_counter()
    executable = tvm.compile(_fused_and_scheduled(mod), target=target)
    log.info("compiled the model (%d ops in TF) in %.2f s", len(fallbacks), time.perf_counter() - start)
    return CompiledModel(frozen, fallbacks, executable, str(target))


def load_model(path) -> CompiledModel:
    """A model written by `CompiledModel.export`; its library is checked against the manifest."""
    import tensorflow as tf
    import tvm

    path = Path(path)
    manifest = json.loads((path / MANIFEST).read_text())
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{path / MANIFEST} has format {manifest.get('format')}, expected {FORMAT}")
    library = path / LIBRARY
    if hashlib.sha256(library.read_bytes()).hexdigest() != manifest["library_sha256"]:
        raise ValueError(f"{library} does not match the SHA-256 in its manifest; refusing to load it")
    graph_def = tf.compat.v1.GraphDef.FromString((path / GRAPH).read_bytes())
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    frozen = FrozenGraph(graph, graph_def, [graph.get_tensor_by_name(t) for t in manifest["inputs"]],
                         [graph.get_tensor_by_name(t) for t in manifest["outputs"]], manifest["structure"])  # fmt: skip
    fallbacks = [whole.Fallback(**fb) for fb in manifest["fallbacks"]]
    register = _register_tf_runner(frozen)
    for fb in fallbacks:
        register(fb)
    return CompiledModel(frozen, fallbacks, tvm.runtime.load_module(str(library)), manifest["target"])


def _fused_and_scheduled(mod):
    """Relax's fusion, then tftvm's default CPU schedule for every fused kernel."""
    import tvm
    from tvm import tirx

    from .graph.lower import fuse
    from .schedule import default_cpu_schedule

    mod = fuse(mod)
    kernels = {gv: f for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)}
    scheduled = default_cpu_schedule(tvm.IRModule({gv.name_hint: f for gv, f in kernels.items()}))
    for gv in kernels:
        mod.update_func(gv, scheduled[gv.name_hint])
    return mod


def _register_tf_runner(frozen):
    """The function that makes one TF node callable from the VM, by a global name.

    The node runs as one eager TF op (TF's own op dispatch, about 35 µs); a node
    whose attributes cannot be passed eagerly runs as the frozen graph pruned to it.
    """
    import tensorflow as tf
    import tvm_ffi

    graph = frozen.graph

    def register(fb: whole.Fallback) -> None:
        op = graph.get_operation_by_name(fb.node)
        dtypes = [graph.get_tensor_by_name(f).dtype for f in fb.feeds]
        run_op = _eager_op(op, len(fb.fetches)) or _pruned(frozen, fb.feeds, fb.fetches)

        def run(*args):
            start = time.perf_counter()
            tensors = [_to_tf(a) for a in args]
            tensors = [t if t.dtype == d else tf.cast(t, d) for t, d in zip(tensors, dtypes)]
            outs = [_to_tvm(y) for y in run_op(tensors)]
            fb.calls += 1
            fb.seconds += time.perf_counter() - start
            return outs[0] if len(outs) == 1 else outs

        tvm_ffi.register_global_func(fb.packed_name, run, override=True)

    return register


def _eager_op(op, num_outputs: int):
    """`op` as an eager call of its TF op type with its attributes; None if they do not translate."""
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
        return execute.execute(op_type, num_outputs, tensors, attrs, context.context())

    return run


def _pruned(frozen, feeds: list[str], fetches: list[str]):
    import tensorflow as tf

    wrapped = tf.compat.v1.wrap_function(lambda: tf.graph_util.import_graph_def(frozen.graph_def, name=""), [])
    graph = wrapped.graph
    pruned = wrapped.prune([graph.get_tensor_by_name(f) for f in feeds],
                           [graph.get_tensor_by_name(f) for f in fetches])  # fmt: skip
    return lambda tensors: pruned(*tensors)


def _to_tf(t):
    """A TVM tensor as a TF tensor, sharing its memory."""
    import tensorflow as tf

    return tf.experimental.dlpack.from_dlpack(t.__dlpack__())


def _to_tvm(t):
    """A TF tensor as a TVM tensor, sharing its memory unless TVM's alignment needs a copy."""
    import tensorflow as tf
    import tvm

    try:
        return tvm.runtime.from_dlpack(tf.experimental.dlpack.to_dlpack(t))
    except (ValueError, RuntimeError, tvm.error.TVMError):
        return tvm.runtime.tensor(t.numpy())
