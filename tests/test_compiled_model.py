"""The reverse bridge: a whole model on TVM's Relax VM, with TF running the ops TVM lacks."""
import keras
import numpy as np
import pytest
import tensorflow as tf
import tftvm
from tftvm.graph.frontend import Unsupported

from conftest import run_python


@pytest.fixture(scope="module")
def mixed_model():
    """Dense layers around three ops outside the converter table: lgamma, bessel_i0e, band_part."""
    keras.utils.set_random_seed(0)
    inp = keras.Input((8,))
    h = keras.layers.Dense(16, activation="relu")(inp)
    h = keras.layers.Lambda(lambda t: tf.math.special.bessel_i0e(tf.math.lgamma(t + 0.5)))(h)
    h = keras.layers.Lambda(lambda t: tf.linalg.band_part(t, 0, -1))(h)
    return keras.Model(inp, keras.layers.Dense(4)(h))


@pytest.fixture(scope="module")
def compiled(mixed_model):
    return tftvm.compile_model(mixed_model, [tf.TensorSpec([None, 8])])


def test_unconverted_ops_run_in_tf_and_results_match(mixed_model, compiled, rng):
    for batch in (1, 5, 17):  # one symbolic-batch program for every size
        x = rng.standard_normal((batch, 8)).astype(np.float32)
        np.testing.assert_allclose(compiled(x), mixed_model(x), rtol=1e-5, atol=1e-5)
    assert sorted(fb.op for fb in compiled.fallbacks) == ["BesselI0e", "Lgamma", "MatrixBandPart"]


def test_report_names_the_tf_ops_and_their_calls(mixed_model, rng):
    exe = tftvm.compile_model(mixed_model, [tf.TensorSpec([None, 8])])
    for _ in range(3):
        exe(rng.standard_normal((2, 8)).astype(np.float32))
    report = exe.report()
    for op in ("BesselI0e", "Lgamma", "MatrixBandPart"):
        assert f"in TF: {op} (" in report and "ran 3 times" in report
    assert report.startswith("compute nodes:") and "3 calls" in report


def test_inputs_whose_none_batches_meet_must_agree(rng):
    # a + b over two inputs with their own None batch: compiled with one batch dim for both.
    a, b = keras.Input((4,)), keras.Input((4,))
    model = keras.Model([a, b], keras.layers.Dense(3)(a * b + a))
    exe = tftvm.compile_model(model, [[tf.TensorSpec([None, 4]), tf.TensorSpec([None, 4])]])
    assert exe.summary().fraction == 1.0
    for n in (1, 5):
        x, y = rng.standard_normal((n, 4)).astype(np.float32), rng.standard_normal((n, 4)).astype(np.float32)
        np.testing.assert_allclose(exe([x, y]), model([x, y]), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="shapes do not fit one another.*in1"):
        exe([x, x[:2]])


def test_fallback_error_names_the_ops(mixed_model):
    with pytest.raises(Unsupported, match="no converter for (BesselI0e|Lgamma|MatrixBandPart)"):
        tftvm.compile_model(mixed_model, [tf.TensorSpec([None, 8])], fallback="error")
    with pytest.raises(ValueError, match="fallback must be 'tf' or 'error'"):
        tftvm.compile_model(mixed_model, [tf.TensorSpec([None, 8])], fallback="numpy")


def test_a_fully_converted_model_needs_no_tf(rng):
    keras.utils.set_random_seed(0)
    inp = keras.Input((10, 32))
    att = keras.layers.MultiHeadAttention(num_heads=4, key_dim=8)(inp, inp)
    h = keras.layers.LayerNormalization()(inp + att)
    block = keras.Model(inp, keras.layers.LayerNormalization()(h + keras.layers.Dense(32)(h)))
    exe = tftvm.compile_model(block, [tf.TensorSpec([None, 10, 32])], fallback="error")
    x = rng.standard_normal((3, 10, 32)).astype(np.float32)
    np.testing.assert_allclose(exe(x), block(x), rtol=1e-4, atol=1e-4)
    assert exe.fallbacks == []


def test_bad_inputs_are_clear_errors(compiled):
    with pytest.raises(TypeError, match="takes 1 inputs, got 2"):
        compiled(np.zeros((1, 8), np.float32), np.zeros((1, 8), np.float32))
    with pytest.raises(TypeError, match="input 0 must have dtype float32, got int32"):
        compiled(np.zeros((2, 8), np.int32))
    with pytest.raises(ValueError, match=r"input 0 must have shape \(None, 8\), got \(2, 9\)"):
        compiled(np.zeros((2, 9), np.float32))
    with pytest.raises(ValueError, match="must have shape"):
        compiled(np.zeros(8, np.float32))


LOAD = """
import numpy as np, tftvm
exe = tftvm.load_model({path!r})
x = np.load({x!r})
np.save({out!r}, exe(x).numpy())
print(exe.report())
"""


def test_export_reloads_in_a_fresh_process(mixed_model, compiled, tmp_path, rng):
    path = compiled.export(tmp_path / "model")
    x = rng.standard_normal((6, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    proc = run_python(LOAD.format(path=str(path), x=str(tmp_path / "x.npy"), out=str(tmp_path / "y.npy")))
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), mixed_model(x), rtol=1e-5, atol=1e-5)
    assert "in TF: MatrixBandPart" in proc.stdout and "ran 1 times" in proc.stdout


def test_a_tampered_export_is_refused(compiled, tmp_path):
    path = compiled.export(tmp_path / "model")
    lib = path / "model.so"
    data = bytearray(lib.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte
    lib.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="does not match the SHA-256"):
        tftvm.load_model(path)


def test_symbolic_batch_and_sequence_through_attention_after_a_tf_op(rng):
    # The VM hands the lgamma (in TF) symbolic batch and sequence dims, and the attention
    # after it compiles once for every batch and sequence length.
    keras.utils.set_random_seed(0)
    inp = keras.Input((None, 8))
    h = keras.layers.Dense(16, activation="relu")(inp)
    h = keras.layers.Lambda(lambda t: tf.math.lgamma(t + 1.0))(h)
    att = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)(h, h)
    model = keras.Model(inp, keras.layers.Dense(4)(keras.layers.LayerNormalization()(h + att)))
    exe = tftvm.compile_model(model, [tf.TensorSpec([None, None, 8])])
    for batch, seq in ((1, 3), (2, 7), (4, 16)):
        x = rng.standard_normal((batch, seq, 8)).astype(np.float32)
        np.testing.assert_allclose(exe(x), model(x), rtol=1e-4, atol=1e-4)
    assert [fb.op for fb in exe.fallbacks] == ["Lgamma"] and exe.calls == 3


EXPORT_BAND = """
import keras, tensorflow as tf, tftvm
inp = keras.Input((6,))
model = keras.Model(inp, keras.layers.Lambda(lambda t: tf.linalg.band_part(t, 0, {upper}))(inp))
tftvm.compile_model(model, [tf.TensorSpec([None, 6])]).export({path!r})
"""


def test_models_exported_by_different_processes_load_side_by_side(tmp_path, rng):
    # Two fresh processes give their models the same node names; loaded into one
    # process, each must still call its own TF op.
    for upper in (1, 2):
        proc = run_python(EXPORT_BAND.format(upper=upper, path=str(tmp_path / f"m{upper}")))
        assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = [tftvm.load_model(tmp_path / f"m{upper}") for upper in (1, 2)]
    first, second = loaded[0].fallbacks[0], loaded[1].fallbacks[0]
    assert first.node == second.node and first.packed_name != second.packed_name
    x = rng.standard_normal((2, 6)).astype(np.float32)
    for upper, exe in zip((1, 2), loaded):
        np.testing.assert_array_equal(exe(x), np.triu(np.tril(x, upper)))


def test_values_only_tf_can_hold_stay_inside_one_tf_island(rng):
    # TensorList handles (variants) cannot cross into the VM: the list ops run together
    # in TF, the math around them in TVM.
    @tf.function
    def fn(x):
        h = tf.tanh(x) * 2.0
        lst = tf.TensorArray(tf.float32, size=2).write(0, h).write(1, h + 1.0)
        return lst.stack() * 3.0 + 1.0

    exe = tftvm.compile_model(fn, [tf.TensorSpec([None, 4])])
    for batch in (1, 3):
        x = rng.standard_normal((batch, 4)).astype(np.float32)
        np.testing.assert_allclose(exe(x), fn(x), rtol=1e-5, atol=1e-5)
    (island,) = [fb for fb in exe.fallbacks if len(fb.nodes) > 1]
    assert {"TensorListReserve", "TensorListSetItem", "TensorListStack"} <= set(island.op.split(", "))
    assert island.reason.endswith("joined by values of dtype variant, which only TF can hold")
    summary = exe.summary()
    assert {op.op for op in summary.in_tf} >= {"TensorListReserve", "TensorListStack"}
    assert "Tanh" not in {op.op for op in summary.in_tf}


def test_nested_inputs_and_outputs_both_paths(rng):
    keras.utils.set_random_seed(0)
    a, b = keras.Input((4,)), keras.Input((4,))
    model = keras.Model([a, b], {"sum": keras.layers.Dense(3)(a * 2.0 + b), "prod": a * b})
    spec = [[tf.TensorSpec([2, 4]), tf.TensorSpec([2, 4])]]
    x = [rng.standard_normal((2, 4)).astype(np.float32) for _ in range(2)]
    want = model(x)
    for compiled in (tftvm.compile_model(model, spec), tftvm.optimize(model, spec, min_cluster_size=1)):
        got = compiled(x)
        assert set(got) == {"sum", "prod"}
        for key in got:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-5)
        assert compiled.summary().offloaded == compiled.summary().compute_nodes


def test_a_converter_that_crashes_costs_one_op_not_the_model(monkeypatch, rng):
    from tftvm.graph import frontend

    def broken(ctx, node, x):
        raise TypeError("a converter bug")

    monkeypatch.setitem(frontend.CONVERTERS, "Tanh", broken)
    fn = tf.function(lambda x: tf.tanh(x * 2.0) + 1.0)
    exe = tftvm.compile_model(fn, [tf.TensorSpec([None, 3])])
    x = rng.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(exe(x), fn(x), rtol=1e-6)
    (op,) = exe.summary().in_tf
    assert op.op == "Tanh" and op.reason == "converter failed: TypeError: a converter bug"
    assert exe.summary().offloaded == 2


def test_a_keras_lstm_runs_with_its_gates_in_tvm_in_both_paths(rng):
    keras.utils.set_random_seed(0)
    inp = keras.Input((5, 4))
    model = keras.Model(inp, keras.layers.Dense(2)(keras.layers.LSTM(8)(inp)))
    x = rng.standard_normal((3, 5, 4)).astype(np.float32)
    for compiled in (tftvm.compile_model(model, [tf.TensorSpec([None, 5, 4])]),
                     tftvm.optimize(model, [tf.TensorSpec([None, 5, 4])])):  # fmt: skip
        np.testing.assert_allclose(compiled(x), model(x), rtol=1e-5, atol=1e-5)
        summary = compiled.summary()
        body = {op.op for op in summary.in_tf if "inside While" in op.reason}
        assert "TensorListGetItem" in body and "TvmCall" not in body  # the loop's list ops stay in TF
        assert "Sigmoid" not in body  # the gates run in TVM, inside the body
        assert summary.offloaded >= 5  # the body's BiasAdd, Split, Sigmoid x3, Tanh, Mul at least


def test_kernels_keep_noalias_with_a_none_batch(rng):
    """TVM 0.27 emits every function with the no-alias setting of the last one declared,
    and with a None batch that is the VM's shape function: without the workaround no kernel
    got `noalias` (ResNet50 at 224 ran 2.4x slower with a None batch than with batch 1)."""
    import re

    w = tf.constant(rng.standard_normal((3, 3, 8, 16)).astype(np.float32))
    fn = tf.function(lambda x: tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME")))
    compiled = tftvm.compile_model(fn, [tf.TensorSpec([None, 12, 12, 8])])
    library = compiled._executable.mod
    source = "".join(m.inspect_source("ll") for m in [library, *library.imports] if m.kind == "llvm")
    assert re.search(r"^define internal fastcc i32 @\w*conv2d\w*_compute_\(.*ptr noalias", source, re.M)
    x = rng.standard_normal((2, 12, 12, 8)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(compiled(x)), fn(x).numpy(), rtol=1e-4, atol=1e-4)


def test_a_none_batch_up_to_the_bound_runs_the_entry_whose_memory_is_planned(rng):
    """Relax plans no shared storage for sizes it cannot prove equal (n x 36864 and n x 73728
    bytes): the bounded entry, planned for a batch of up to UPPER_BOUND, reuses storage as a
    static program does. Batches up to the bound run it, larger ones the unbounded "main";
    both match TF."""
    import tvm
    from tftvm.graph.lowering.bounded_plan import BOUNDED_ENTRY, UPPER_BOUND

    ws = [tf.constant(rng.standard_normal((3, 3, c, c + 8)).astype(np.float32) / 8) for c in (8, 16, 24, 32)]

    def fn(x):  # intermediates of 16, 24 and 32 channels: the third fits where the first was
        for w in ws:
            x = tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME"))
        return x

    compiled = tftvm.compile_model(tf.function(fn), [tf.TensorSpec([None, 24, 24, 8])], keep_faster=False)
    storages = {}
    for entry in ("main", BOUNDED_ENTRY):
        vm = tvm.relax.VirtualMachine(compiled._executable, tvm.cpu())
        calls = []
        vm.set_instrument(lambda func, sym, before, ret, *a: calls.append(sym) if before else 0)
        vm[entry](tvm.runtime.tensor(np.zeros((2, 24, 24, 8), np.float32)))
        storages[entry] = calls.count("vm.builtin.alloc_storage")
    assert storages[BOUNDED_ENTRY] < storages["main"]

    class Spy:  # which entry each call runs
        def __init__(self, vm):
            self.vm, self.entries = vm, []

        def __getitem__(self, name):
            self.entries.append(name)
            return self.vm[name]

    compiled._vm = spy = Spy(compiled._vm)
    for batch in (1, UPPER_BOUND, UPPER_BOUND + 1):
        x = rng.standard_normal((batch, 24, 24, 8)).astype(np.float32)
        np.testing.assert_allclose(np.asarray(compiled(x)), fn(x).numpy(), rtol=1e-4, atol=1e-4)
    assert spy.entries == [BOUNDED_ENTRY, BOUNDED_ENTRY, "main"]


def test_specialized_shapes_run_their_own_static_program(mixed_model, rng):
    exe = tftvm.compile_model(mixed_model, [tf.TensorSpec([None, 8])], specialize=[(4, 8), [(2, 8)]])
    assert sorted(exe.statics) == [((2, 8),), ((4, 8),)]
    for batch in (4, 3, 2, 4):
        x = rng.standard_normal((batch, 8)).astype(np.float32)
        np.testing.assert_allclose(exe(x), mixed_model(x), rtol=1e-5, atol=1e-5)
    assert [exe.statics[((b, 8),)].calls for b in (4, 2)] == [2, 1] and exe.calls == 4
    assert "static program for input shapes [(4, 8)]" in exe.report()


def test_static_programs_export_and_a_tampered_one_is_refused(mixed_model, tmp_path, rng):
    exe = tftvm.compile_model(mixed_model, [tf.TensorSpec([None, 8])], specialize=[(3, 8)])
    path = exe.export(tmp_path / "model")
    x = rng.standard_normal((3, 8)).astype(np.float32)
    loaded = tftvm.load_model(path)
    np.testing.assert_allclose(loaded(x), mixed_model(x), rtol=1e-5, atol=1e-5)
    assert loaded.statics[((3, 8),)].calls == 1
    with open(path / "model_static0.so", "ab") as f:
        f.write(b"\0")
    with pytest.raises(ValueError, match="model_static0.so does not match the SHA-256"):
        tftvm.load_model(path)


def test_bad_specialize_is_a_clear_error(mixed_model):
    sig = [tf.TensorSpec([None, 8])]
    with pytest.raises(ValueError, match=r"specialize: shape \(2, 9\) does not fit input 0, which has shape \(None, 8\)"):
        tftvm.compile_model(mixed_model, sig, specialize=[(2, 9)])
    with pytest.raises(ValueError, match="specialize: each item must give one shape .* per model input"):
        tftvm.compile_model(mixed_model, sig, specialize=[(2, None)])
    a, b = keras.Input((4,)), keras.Input((4,))
    shared = keras.Model([a, b], a * b)  # one batch dim for both inputs
    with pytest.raises(ValueError, match="dim 0 of input 1 is 3, but the model shares it with dim 0 of input 0"):
        tftvm.compile_model(shared, [[tf.TensorSpec([None, 4]), tf.TensorSpec([None, 4])]], specialize=[[(2, 4), (3, 4)]])
    with pytest.raises(ValueError, match="specialize: each item must give one shape"):
        tftvm.compile_model(shared, [[tf.TensorSpec([None, 4]), tf.TensorSpec([None, 4])]], specialize=[(2, 4)])


def test_a_conv_takes_its_batch_norm_and_relu_into_one_kernel(rng):
    """The converter binds Identity-like nodes as one variable to another; FuseOps cannot
    look through such bindings, and every conv, BN scale and ReLU ran as its own kernel."""
    import re

    keras.utils.set_random_seed(0)
    inp = keras.Input((10, 10, 4))
    h = keras.layers.BatchNormalization()(keras.layers.Conv2D(8, 3)(inp))
    model = keras.Model(inp, keras.layers.ReLU()(h))
    compiled = tftvm.compile_model(model, [tf.TensorSpec([None, 10, 10, 4])])
    library = compiled._executable.mod
    source = "".join(m.inspect_source("ll") for m in [library, *library.imports] if m.kind == "llvm")
    kernels = set(re.findall(r"^define internal .*?@(\w+)_compute_\(", source, re.M))
    assert [k for k in kernels if "conv2d" in k and "relu" in k], kernels
    assert not {"relu", "multiply"} & kernels, kernels
    x = rng.standard_normal((2, 10, 10, 4)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(compiled(x)), model(x).numpy(), rtol=1e-5, atol=1e-5)


def test_a_model_tf_cannot_run_on_the_safety_nets_inputs(rng):
    """The safety net times a model on zeros for its ints and bools, and TF itself raised on
    generate()'s padding mask of zeros: compile_model failed. The first calls of each shape
    decide instead; a TF node's error keeps TF's type (the VM handed it on as RuntimeError)."""
    fn = tf.function(lambda x, i: tf.slice(tf.exp(x), tf.reshape(i - 1, [1]), [2]) * 2.0)
    model = tftvm.compile_model(fn, [tf.TensorSpec([None], tf.float32), tf.TensorSpec([], tf.int32)], keep_faster=True)
    x = rng.standard_normal(6).astype(np.float32)
    for i in (1, 3, 5) * 4:  # the trial runs both sides in turn
        np.testing.assert_allclose(np.asarray(model(x, np.int32(i))), fn(x, np.int32(i)).numpy(), rtol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError):
        fn(x, np.int32(0))
    with pytest.raises(tf.errors.InvalidArgumentError):
        model(x, np.int32(0))


def test_weights_are_held_once_beside_the_library_and_travel_with_an_export(tmp_path, rng):
    """A weight (1 MiB or more) is in neither the model's graph nor its libraries: it is a TF
    tensor that TF's steps and the VM read alike (here MatrixBandPart, which runs in TF, is fed
    the VM's weight argument: TF's own tensor). A kernel's packed layout of a weight is a
    copy of its own, written to the export's weights file; graph.pb holds the weights as
    Consts, a frozen graph as TF writes one."""
    import json

    w1 = tf.constant(rng.standard_normal((512, 1024)).astype(np.float32) * 0.04)
    w2 = tf.constant(rng.standard_normal((1024, 512)).astype(np.float32) * 0.03)

    def model(x):
        h = tf.tanh(tf.matmul(x, w1))
        return tf.matmul(h, tf.linalg.band_part(w2, 0, -1)) + tf.reduce_sum(w2, axis=0)

    compiled = tftvm.compile_model(model, [tf.TensorSpec([None, 512])], specialize=[(2, 512)], keep_faster=True)
    assert compiled.timing is not None  # its TF side (the frozen graph fed the weights) ran too
    path = compiled.export(tmp_path / "model")
    loaded = tftvm.load_model(path)
    for batch in (3, 3, 3, 3, 2):  # a new batch's first calls: 2 in TVM, then 2 in TF (the safety net's trial)
        x = rng.standard_normal((batch, 512)).astype(np.float32)
        for m in (compiled, loaded):
            np.testing.assert_allclose(m(x).numpy(), model(tf.constant(x)).numpy(), rtol=1e-4, atol=1e-4)
    assert loaded.statics[((2, 512),)].calls == 1
    weight_bytes = 2 * 512 * 1024 * 4
    assert (path / "model.so").stat().st_size < weight_bytes / 4
    assert (path / "model_static0.so").stat().st_size < weight_bytes / 4
    assert (path / "graph.pb").stat().st_size > weight_bytes
    manifest = json.loads((path / "tftvm_model.json").read_text())
    for entries in (manifest["weights"], manifest["static"][0]["weights"]):
        assert sum("tensor" in e for e in entries) == 1, entries  # w2, as the graph has it
        assert sum("saved" in e for e in entries) == 1, entries  # w1 in the matmul's packed layout
    assert (path / "weights.params").stat().st_size < 1.1 * weight_bytes  # two packed w1s, no w2
    with open(path / "weights.params", "ab") as f:
        f.write(b"\0")
    with pytest.raises(ValueError, match="weights.params does not match the SHA-256"):
        tftvm.load_model(path)
