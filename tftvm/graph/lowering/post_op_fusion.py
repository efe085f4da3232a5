"""Post-ops for tftvm's bf16 product kernels: the ops after a product done as it writes.

A bias add, a residual add and an activation after a matmul or conv would each be a pass
over the product's f32 output in memory. Where a bf16 product (lowering/precision.py) is
followed by them, and nothing else reads the values between, the chain becomes one call of a
kernel variant that applies them to each block of results while it is in registers
(cpu.post_ops, oneDNN's post-ops). And where every reader of that kernel's result reads bf16
anyway (the next product rounds its input to bf16; a depthwise conv casts each element as it
reads it and accumulates in f32), the kernel writes bf16: half the bytes written and read,
which is what the memory-bound depthwise convs of MobileNetV2 and EfficientNet wait on.
"""
from __future__ import annotations

from .bindings import readers_and_vars, shape_of, static_dims


def fuse(mod, makers: dict, report):
    """`mod` with the bias add after a bf16 product, and a residual add and a ReLU (ReLU6,
    swish) after that where there are, done by the product's kernel as it writes its results
    (cpu.post_ops): each would be a pass over the product's f32 output in memory. `makers`:
    the bf16 kernels' GlobalVars -> make(post ops); `report` (a PrecisionReport) counts them.
    Each value between the product and the last op taken must have no other reader; the bias is
    one value per output column. Where every reader of the last op's value reads bf16 as well
    (`_reads_bf16`), the kernel writes bf16 and those readers read it."""
    from tvm import relax
    from tvm.relax.dpl import is_op, rewrite_call, wildcard

    from ...cpu.post_ops import PostOps

    added = {}  # kernel name -> GlobalVar
    mod = relax.transform.CanonicalizeBindings()(mod)  # no `lv1 = lv` between the ops
    product = is_op("relax.call_tir")(wildcard(), wildcard())
    reshaped = is_op("relax.reshape")(product, wildcard())
    core = product | reshaped | is_op("relax.reshape")(reshaped, wildcard())
    bias, residual = wildcard(), wildcard()
    biased = is_op("relax.add")(core, bias) | is_op("relax.add")(bias, core)
    summed = is_op("relax.add")(biased, residual) | is_op("relax.add")(residual, biased)
    top = summed | biased  # the value the activation reads
    relu, clip = is_op("relax.nn.relu")(top), is_op("relax.clip")(top, wildcard(), wildcard())
    sigmoid = is_op("relax.sigmoid")(top)
    swish = is_op("relax.multiply")(top, sigmoid) | is_op("relax.multiply")(sigmoid, top)  # one `top` in both
    # a kernel's bf16 results, cast back to f32 for readers that read bf16 as well (_reads_bf16)
    widened = is_op("relax.astype")(wildcard())
    bf16_read = is_op("relax.nn.conv2d")(widened, wildcard())
    twice_cast = is_op("relax.astype")(widened)
    padded = is_op("relax.nn.pad")(widened)

    def read_in_bf16(call, matched):
        narrow = matched[widened].args[0]
        if str(getattr(narrow.ty, "dtype", "")) != "bfloat16":
            return call
        if twice_cast in matched:  # bf16 -> f32 -> bf16: the bf16 value
            return narrow if str(call.attrs.dtype) == "bfloat16" else call
        if padded in matched:  # padded in bf16, then widened for the conv (the next match) to read bf16
            a = call.attrs
            return relax.op.astype(relax.op.nn.pad(narrow, a.pad_width, a.pad_mode, a.pad_value), "float32")
        a = call.attrs
        if int(a.groups) == 1:
            return call
        return relax.op.nn.conv2d(narrow, call.args[1], a.strides, a.padding, a.dilation, a.groups, a.data_layout,
                                  a.kernel_layout, a.out_layout, "float32")

    for func_gv, func in list(mod.functions.items()):
        if not isinstance(func, relax.Function):
            continue
        def readers_of(value) -> tuple:
            var = var_of.get(value)
            return var, readers.get(var, [])

        def reads(value) -> int:
            return len(readers_of(value)[1])

        def fused(call, matched):
            p = matched[product]
            gv = p.args[0]
            inner = [matched[x] for x in (product, reshaped, core, biased, summed, sigmoid) if x in matched]
            # each read once, by the next op (swish reads its input twice); the last op's may be read often
            once = [v for v in inner if not v.same_as(call) and not (swish in matched and v.same_as(matched[top]))]
            if gv not in makers or any(reads(v) != 1 for v in once):
                return call
            if swish in matched and reads(matched[top]) != 2:
                return call
            out_ty = p.ty_args[0] if hasattr(p, "ty_args") else p.ty
            n = int(out_ty.shape.values[-1])
            b = var_of.get(matched[bias], matched[bias])
            if static_dims(shape_of(b) or [None]) not in ([n], [1] * (len(shape_of(b) or []) - 1) + [n]):
                return call
            if str(b.ty.dtype) != "float32":
                return call
            activation = ("relu" if relu in matched else "relu6" if clip in matched and _is_relu6(call)
                          else "swish" if swish in matched else None)  # fmt: skip
            if clip in matched and activation is None:
                return call
            args = [*p.args[1].fields, b if len(shape_of(b)) == 1 else relax.op.reshape(b, [n])]
            r = None
            if summed in matched:
                r = var_of.get(matched[residual], matched[residual])
                before = matched[biased]
                if str(getattr(r.ty, "dtype", "")) != "float32" or not _same_shape(r, var_of.get(before, before)):
                    return call
                dims = list(out_ty.shape.values)
                args.append(r if len(shape_of(r)) == len(dims) else relax.op.reshape(r, dims))
            result = var_of.get(call)
            to_bf16 = result is not None and all(v is not None and _reads_bf16(v, result, readers_of)
                                                 for v in readers.get(result, [None]))  # fmt: skip
            out_dtype = "bfloat16" if to_bf16 else "float32"
            post = PostOps(residual=r is not None, activation=activation, out_dtype=out_dtype)
            name = gv.name_hint + post.name()
            if name not in added:
                added[name] = builder.add_func(makers[gv](post).with_attr("global_symbol", name), name)
            report.post_ops += 1
            report.bf16_outputs += to_bf16
            y = relax.call_tir(added[name], args, relax.TensorType(out_ty.shape, post.out_dtype))
            if core in matched and not p.same_as(matched[core]):
                y = relax.op.reshape(y, list(call.ty.shape.values))
            return relax.op.astype(y, "float32") if to_bf16 else y  # read in bf16 by the next pass's rewrites

        builder = relax.BlockBuilder(mod)  # gives the new kernels' GlobalVars their types
        rewritten = func
        for pattern in (relu | clip | swish, summed, biased):  # the longest chains first
            var_of, readers = readers_and_vars(rewritten)  # of this pass's input: a rewrite makes new values
            rewritten = rewrite_call(pattern, fused, rewritten)
        rewritten = rewrite_call(bf16_read | twice_cast | padded, read_in_bf16, rewritten)
        if not rewritten.same_as(func):
            mod = builder.get()
            mod[func_gv] = rewritten
    return mod


def _reads_bf16(reader, var, readers_of) -> bool:
    """Whether `reader` of `var` could read it in bf16 as well as in f32 at no loss: a cast
    to bf16 (a bf16 product's input), a depthwise or grouped conv taking it as its data
    (TOPI's conv casts each element as it reads it, and accumulates in f32), or a zero
    padding (Keras' ZeroPadding2D before a stride-2 depthwise conv) whose readers all do.
    `readers_of(value)`: a bound value's variable and the values that read it."""
    name = getattr(getattr(reader, "op", None), "name", "")
    if name == "relax.astype":
        return str(reader.attrs.dtype) == "bfloat16"
    if name == "relax.nn.conv2d":
        return int(reader.attrs.groups) > 1 and reader.args[0].same_as(var) and str(reader.ty.dtype) == "float32"
    if name == "relax.nn.pad":
        if str(reader.attrs.pad_mode) != "constant" or float(reader.attrs.pad_value) != 0.0:
            return False
        padded, readers = readers_of(reader)
        return bool(readers) and all(r is not None and _reads_bf16(r, padded, readers_of) for r in readers)
    return False


def _is_relu6(clip) -> bool:
    low, high = (float(getattr(a, "value", float("nan"))) for a in clip.args[1:3])
    return (low, high) == (0.0, 6.0)


def _same_shape(a, b) -> bool:
    """Do `a` and `b` have the same dims (symbolic ones the same variable)?"""
    from tvm.sym.analyzer import Analyzer

    x, y = shape_of(a), shape_of(b)
    if x is None or y is None or len(x) != len(y):
        return False
    analyzer = Analyzer()
    return all(analyzer.can_prove_equal(d, e) for d, e in zip(x, y))
