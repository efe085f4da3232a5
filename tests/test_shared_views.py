"""A view that only views read, repeated per reader (lowering/shared_views.py): a decoder
step's per-layer slice of its stacked cache fuses into the key and value cache updates
that read it, instead of being copied out once per layer and step."""
import numpy as np
import tensorflow as tf
import tftvm
from tensorflow.compiler.tf2xla.python import xla
from tftvm.graph.lowering import program, shared_views
from tvm import relax, tirx


def cache_update(cache, update, index):
    """keras_hub's cached attention for one layer: the layer's cache, then keys and values
    out of it, each updated at `index` along the sequence."""
    layer = cache[:, 1]
    starts = tf.stack([0, index, 0, 0])
    keys = xla.dynamic_update_slice(layer[:, 0], update, starts)
    values = xla.dynamic_update_slice(layer[:, 1], update * 2.0, starts)
    return keys, values


SHAPES = [(2, 3, 2, 8, 4, 16), (2, 1, 4, 16), ()]


def kernels(mod) -> list[str]:
    return [gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)]


def test_the_layers_slice_fuses_into_both_updates_and_the_numbers_stay_tfs(rng, monkeypatch):
    fused = []
    fuse = program.fuse

    def spy(mod, *args, **kwargs):
        fused.append(fuse(mod, *args, **kwargs))
        return fused[-1]

    monkeypatch.setattr(program, "fuse", spy)
    specs = [tf.TensorSpec(s, tf.float32 if s else tf.int32) for s in SHAPES]
    compiled = tftvm.optimize(tf.function(cache_update), specs, keep_faster=False, min_cluster_size=1)
    cache, update = (rng.standard_normal(s).astype(np.float32) for s in SHAPES[:2])
    for index in (0, 5, 7):
        got, want = compiled(cache, update, np.int32(index)), cache_update(cache, update, np.int32(index))
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.numpy(), w.numpy())
    slicing = [[k for k in kernels(m) if "strided_slice" in k] for m in fused]
    # Two kernels slice: the cache updates ("..._kernel"), each reading the cache where it is.
    assert slicing and all(len(s) == 2 and all(k.endswith("_kernel") for k in s) for s in slicing), slicing


def test_a_view_that_something_else_reads_stays_shared():
    x = relax.Var("x", relax.TensorType([4, 6], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            view = bb.emit(relax.op.strided_slice(x, [0], [1], [3]))
            a = bb.emit(relax.op.strided_slice(view, [1], [0], [2]))
            b = bb.emit(relax.op.exp(view))  # not a view: the slice stays one binding
            out = bb.emit_output(relax.Tuple([a, b]))
        bb.emit_func_output(out)
    mod = bb.get()
    assert shared_views.unshare(mod).script() == mod.script()
