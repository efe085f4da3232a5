"""The TF-facing callable: checks arguments, emits one TvmCall node, eager or graph."""
from __future__ import annotations

import logging
import re
from pathlib import Path

import tensorflow as tf
from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import context as tf_context
from tensorflow.python.eager import core as tf_core
from tensorflow.python.framework import ops as tf_ops

from . import gradient
from . import kernel as kernel_lib
from . import native
from .signature import Signature

log = logging.getLogger(__name__)


_EagerTensor = tf_ops.EagerTensor  # not tf.constant(): that would start the TF runtime at import


class TvmOp:
    """A TVM function as a TF op. Call it like any TF op, eagerly or in tf.function.

    Private attributes carry a `_tftvm` prefix: tf.function(op) copies the
    wrapped object's __dict__ onto itself, and a plain `_call` would shadow its own.
    """

    def __init__(self, kernel: kernel_lib.Kernel, name: str, grad=None, prim_func=None,
                 compile_options: dict | None = None):  # fmt: skip
        self.kernel = kernel
        self.name = name
        self.prim_func = prim_func  # the TVM IR it came from (None for a loaded library): for tuning
        self.compile_options = dict(compile_options or {})
        self._tftvm_grad = grad
        self.signature = kernel.signature
        kernel.register()
        if grad is not None:
            gradient.register(kernel.key, name, grad)
        self._tftvm_call = native.load().tvm_call
        self._tftvm_dtypes = [t.tf_dtype for t in self.signature.inputs]
        self._tftvm_eager_attrs = dict(
            Tout=[t.tf_dtype for t in self.signature.outputs],
            key=kernel.key,
            func_name=kernel.func_name,
            op_name=name,
            in_spec=self.signature.in_spec,
            out_spec=self.signature.out_spec,
        )
        # Graph nodes carry the library so a SavedModel loads without our cache.
        self._tftvm_graph_attrs = dict(self._tftvm_eager_attrs, module=kernel.library)
        self._tftvm_single = len(self.signature.outputs) == 1
        self._tftvm_dtype_enums = [d.as_datatype_enum for d in self._tftvm_dtypes]
        self._tftvm_flat_attrs = tuple(x for kv in self._tftvm_eager_attrs.items() for x in kv)

    def __call__(self, *args):
        ctx = tf_context.context()
        if ctx.executing_eagerly() and self._tftvm_all_eager_and_typed(args):
            # The common eager case goes straight to TF's C fast path, as TF's own
            # generated op wrappers do, so a tftvm op dispatches like a native op.
            try:
                outputs = pywrap_tfe.TFE_Py_FastPathExecute(
                    ctx, "TvmCall", None, list(args), *self._tftvm_flat_attrs
                )
            except tf_core._NotOkStatusException as err:
                tf_ops.raise_from_not_ok_status(err, None)
            except tf_core._FallbackException:
                outputs = self._tftvm_call(list(args), **self._tftvm_eager_attrs)
            return outputs[0] if self._tftvm_single else tuple(outputs)
        return self._tftvm_slow_call(args)

    def memoized(self, *args):
        """Call the op as a node that, run again on the very same input buffers (a model's
        weights, read from its variables), returns its last outputs without running TVM
        (see tvm_call.cc: TF never writes a buffer the node still holds)."""
        tensors = [self._tftvm_check(a, i) for i, a in enumerate(args)]
        attrs = self._tftvm_eager_attrs if tf.executing_eagerly() else self._tftvm_graph_attrs
        outputs = self._tftvm_call(tensors, memoize=True, **attrs)
        return outputs[0] if self._tftvm_single else tuple(outputs)

    def _tftvm_all_eager_and_typed(self, args) -> bool:
        enums = self._tftvm_dtype_enums
        if len(args) != len(enums):
            return False
        for a, e in zip(args, enums):
            if type(a) is not _EagerTensor or a._datatype_enum() != e:
                return False
        return True

    def _tftvm_slow_call(self, args):
        if len(args) != len(self._tftvm_dtypes):
            names = ", ".join(t.name for t in self.signature.inputs)
            raise TypeError(
                f"tftvm op '{self.name}' takes {len(self._tftvm_dtypes)} arguments ({names}), "
                f"got {len(args)}"
            )
        tensors = [self._tftvm_check(a, i) for i, a in enumerate(args)]
        attrs = self._tftvm_eager_attrs if tf.executing_eagerly() else self._tftvm_graph_attrs
        outputs = self._tftvm_call(tensors, **attrs)
        return outputs[0] if self._tftvm_single else tuple(outputs)

    def _tftvm_check(self, value, index: int):
        dtype = self._tftvm_dtypes[index]
        value_dtype = getattr(value, "dtype", None)
        if isinstance(value, (tf.Tensor, tf.Variable)) and value_dtype == dtype:
            return value
        arg = self.signature.inputs[index]
        where = f"tftvm op '{self.name}': argument '{arg.name}' (input {index})"
        if isinstance(value, (tf.RaggedTensor, tf.SparseTensor, tf.IndexedSlices)):
            raise TypeError(f"{where} must be a dense tensor, got a {type(value).__name__}")
        if value_dtype is not None and tf.as_dtype(value_dtype) != dtype:
            raise TypeError(
                f"{where} must have dtype {dtype.name}, got {tf.as_dtype(value_dtype).name}"
            )
        try:
            return tf.convert_to_tensor(value, dtype=dtype)
        except (TypeError, ValueError) as err:
            raise TypeError(f"{where} must be a {dtype.name} tensor: {err}") from None

    def rebuilt(self, **options) -> "TvmOp":
        """The same op compiled again, with `options` (e.g. database=) changed."""
        if self.prim_func is None:
            raise TypeError(f"tftvm op '{self.name}' was loaded from a library; it has no TVM IR to rebuild")
        options = {**self.compile_options, **options}
        kernel = kernel_lib.compile_prim_func(self.prim_func, **options)
        return TvmOp(kernel, self.name, grad=self._tftvm_grad, prim_func=self.prim_func, compile_options=options)

    def at_shapes(self, shapes) -> "TvmOp":
        """This op compiled for one set of input `shapes` alone (static buffers, outputs
        following): a variant a ShapeDispatchOp runs at those shapes."""
        from .shape_dispatch import specialized

        if self.prim_func is None:
            raise TypeError(f"tftvm op '{self.name}' was loaded from a library: it has no TVM IR to specialize")
        n_inputs = len(self.signature.inputs)
        if len(shapes) != n_inputs:
            raise ValueError(f"tftvm op '{self.name}' takes {n_inputs} inputs; shapes= gives {len(shapes)} shapes: "
                             f"{shapes}")  # fmt: skip
        func = specialized(self.prim_func, shapes, self.name)
        kernel = kernel_lib.compile_prim_func(func, **self.compile_options)
        return TvmOp(kernel, self.name, grad=self._tftvm_grad, prim_func=func, compile_options=self.compile_options)

    def tuning(self, shapes=None):
        """What `tftvm.tune` tunes (tunable.py): this op's kernel, or, with `shapes`, static
        variants of it at those input shapes (a ShapeDispatchOp)."""
        from . import tunable
        from .shape_dispatch import ShapeDispatchOp

        if shapes is not None:
            return ShapeDispatchOp(self, {}).tuning(shapes)
        return tunable.of_ops([self], self.rebuilt, self, alone=True)

    def save(self, path: str | Path) -> Path:
        """Export the library (and its signature beside it) for `tftvm.load_op`."""
        return self.kernel.save(path)

    def __repr__(self) -> str:
        return f"<tftvm op {self.signature.describe(self.name)}>"


def _symbol(name: str) -> str:
    return re.sub(r"\W", "_", name) or "tvm_op"


def op(inputs_or_func, outputs=None, *, name: str | None = None, func_name: str | None = None,
       num_outputs: int | None = None, target=None, schedule=True,
       grad=None, database=None, signature=None, argument_checks: bool = True) -> TvmOp:  # fmt: skip
    """Turn a TVM function into a TF op.

    Accepts TE tensors (`op([A, B], [C, D])`), a TIR PrimFunc (destination-passing
    style: the trailing `num_outputs` buffers, default 1, are outputs), an
    IRModule of PrimFuncs (choose one with `func_name=`), or any tvm-ffi function
    (`tvm_ffi.Function`, or a `tvm_ffi.Module` with `func_name=`: C++ written against
    tvm-ffi, built with `tvm_ffi.cpp.load_inline`) taking its inputs then its outputs as
    tensors, with `signature=` (`(inputs, outputs)` lists of `(name, dtype, dims)`, or a
    `tftvm.Signature`); such an op runs in this process only (for a library that graphs
    and SavedModels carry, `tvm_ffi.cpp.build` it and use `tftvm.load_op`). `target` defaults to the
    host CPU with its real mcpu. Compiled kernels are cached on disk by content.

    `grad` makes the op differentiable: a callable (another tftvm op, or any
    function of TF ops) taking the forward inputs, outputs and upstream gradients
    as positional arguments, in that order, and returning one gradient per
    floating-point input. Upstream gradients of unused outputs arrive as zeros.
    `grad="auto"` (TE form) derives that backward from the TE compute and
    compiles it as another tftvm op (see autodiff.py for what it covers).
    `schedule`: True (default) for tftvm's default CPU schedule, False to compile
    the function as written, or your own schedule: a function that takes an
    `s_tir.Schedule` of the PrimFunc and schedules it in place (`tftvm.tune` then
    measures it beside MetaSchedule's candidates).
    `database` (default $TFTVM_TUNING_DB): a MetaSchedule database written by
    `tftvm.tune`; a record for this function replaces the schedule.
    `argument_checks=False` leaves TVM's own checks of each argument (rank, dtype, shape,
    alignment) out of the compiled library; the op's TF kernel makes them before every call
    anyway. LLVM's time on those checks grows faster than the number of buffers: a function of
    hundreds of buffers (a whole model's weight preparation) compiles many times faster
    without them. The library, saved, is then safe only behind tftvm's op. A function that
    asserts something itself keeps every check.
    """
    import tvm
    from tvm import te, tirx

    import tvm_ffi

    if isinstance(inputs_or_func, (tvm_ffi.Function, tvm_ffi.Module)):
        return _ffi_op(inputs_or_func, signature, name=name, func_name=func_name, grad=grad)
    if signature is not None:
        raise TypeError("signature= is for tvm-ffi functions; TVM IR carries its own")
    te_form = outputs is not None or _is_te_list(inputs_or_func)
    if te_form:
        ins = list(inputs_or_func)
        outs = [outputs] if isinstance(outputs, te.Tensor) else list(outputs or [])
        if not outs:
            raise TypeError("tftvm.op(inputs, outputs): give the TE output tensors as `outputs`")
        for t in ins + outs:
            if not isinstance(t, te.Tensor):
                raise TypeError(f"tftvm.op TE form takes te.Tensor objects, got {type(t).__name__}")
        if num_outputs not in (None, len(outs)):
            raise ValueError(f"num_outputs={num_outputs} but {len(outs)} output tensors were given")
        func, num_outputs = te.create_prim_func(ins + outs), len(outs)
        default_name = outs[0].op.name
    elif isinstance(inputs_or_func, tvm.IRModule):
        prims = {gv.name_hint: f for gv, f in inputs_or_func.functions.items()
                 if isinstance(f, tirx.PrimFunc)}  # fmt: skip
        if func_name is None and len(prims) == 1:
            func_name = next(iter(prims))
        if func_name not in prims:
            raise ValueError(
                f"func_name={func_name!r}: the IRModule holds PrimFuncs {sorted(prims)}; pick one"
            )
        func, default_name = prims[func_name], func_name
    elif isinstance(inputs_or_func, tirx.PrimFunc):
        func = inputs_or_func
        default_name = str(func.attrs["global_symbol"]) if func.attrs and "global_symbol" in func.attrs else "tvm_op"
    else:
        raise TypeError(
            "tftvm.op takes TE tensors (inputs, outputs), a tirx.PrimFunc or an IRModule, got "
            f"{type(inputs_or_func).__name__}; for an exported library use tftvm.load_op(path, ...)"
        )
    name = name or func_name or default_name
    if not (isinstance(schedule, bool) or callable(schedule)):
        raise TypeError(f"schedule must be True, False or a function that schedules an s_tir.Schedule, "
                        f"got {type(schedule).__name__}")  # fmt: skip
    if isinstance(grad, str) and grad == "auto":
        if not te_form:
            raise ValueError(f"grad='auto' for '{name}' needs the TE form tftvm.op(inputs, outputs)")
        grad = _auto_grad(ins, outs, name, target, database)
    options = dict(func_name=_symbol(func_name or name), num_outputs=num_outputs or 1,
                   target=target, schedule=schedule, database=database, argument_checks=argument_checks)  # fmt: skip
    kernel = kernel_lib.compile_prim_func(func, **options)
    return TvmOp(kernel, name, grad=grad, prim_func=func, compile_options=options)


def _ffi_op(function, signature, *, name, func_name, grad) -> TvmOp:
    import tvm_ffi

    if isinstance(function, tvm_ffi.Module):
        if func_name is None or not function.implements_function(func_name, True):
            raise ValueError(f"func_name={func_name!r}: name the function of the tvm-ffi module to make an op of")
        function = function.get_function(func_name)
    if signature is None:
        raise TypeError("a tvm-ffi function carries no shapes: give signature=(inputs, outputs), each a list "
                        "of (name, dtype, dims), or a tftvm.Signature")  # fmt: skip
    if isinstance(grad, str):
        raise ValueError("grad='auto' differentiates TE compute; give a tvm-ffi function's gradient as a callable")
    if not isinstance(signature, Signature):
        signature = Signature.from_shapes(*signature)
    name = name or func_name or "tvm_ffi_function"
    return TvmOp(kernel_lib.FunctionKernel(_symbol(name), signature, function), name, grad=grad)


def _auto_grad(ins, outs, name: str, target, database):
    """grad="auto": the backward autodiff derives from the TE compute, compiled as another op,
    as a grad= callable (forward inputs, outputs, upstream gradients) -> input gradients."""
    from . import autodiff

    backward = op(*autodiff.backward_compute(ins, outs, name), name=f"{name}_grad", target=target,
                  database=database)  # fmt: skip
    n_in, n_out = len(ins), len(outs)
    return lambda *args: backward(*args[:n_in], *args[n_in + n_out :])


def _is_te_list(x) -> bool:
    from tvm import te

    return isinstance(x, (list, tuple)) and all(isinstance(t, te.Tensor) for t in x)


def load_op(path: str | Path, func_name: str, *, signature=None, num_outputs: int = 1,
            name: str | None = None, grad=None) -> TvmOp:  # fmt: skip
    """An op from an exported TVM library.

    The signature comes from the library's sidecar (written by `TvmOp.save` /
    `Kernel.save`) where it has one; otherwise give `signature=`: the PrimFunc the
    library was built from, a `tftvm.Signature`, or `(inputs, outputs)` lists of
    `(name, dtype, dims)` with int or variable-name dims.
    """
    import tvm
    from tvm import tirx

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"tftvm.load_op: no TVM library at {path}")
    sidecar = path.with_name(path.name + kernel_lib.SIDECAR_SUFFIX)
    if signature is None and sidecar.exists():
        kernel = kernel_lib.read_saved(path, func_name)
    else:
        if signature is None:
            raise ValueError(
                f"tftvm.load_op: {path} carries no tftvm signature; pass signature= (the "
                "PrimFunc it was built from, a tftvm.Signature, or (inputs, outputs) triples)"
            )
        if isinstance(signature, tirx.PrimFunc):
            signature = Signature.from_prim_func(signature, num_outputs)
        elif not isinstance(signature, Signature):
            signature = Signature.from_shapes(*signature)
        kernel = kernel_lib.Kernel(func_name, signature, path.read_bytes())
    try:
        module = tvm.runtime.load_module(str(path))
    except Exception as err:  # TVM reports a bad file with its own error types
        raise ValueError(f"tftvm.load_op: {path} is not a loadable TVM library: {err}") from err
    if not module.implements_function(func_name, True):
        raise LookupError(f"tftvm.load_op: the TVM library {path} has no function '{func_name}'")
    return TvmOp(kernel, name or func_name, grad=grad)
