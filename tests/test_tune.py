"""MetaSchedule tuning: records land in a JSON database and later builds use them."""
import glob
import json
import logging

import numpy as np
import pytest
import tftvm
from tvm import te


def matmul(n=32):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    r = te.reduce_axis((0, n), name="r")
    return [A, B], te.compute((n, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """(untuned op, tuned op, database, candidate directories the tune left behind).

    The build workers are started with TMPDIR set to a directory of this fixture's own, so a
    tune running at the same time in another pytest worker cannot put its candidates there."""
    database = tmp_path_factory.mktemp("tuning_db")
    scratch = tmp_path_factory.mktemp("tune_tmp")
    untuned = tftvm.op(*matmul(), name="tuned_mm")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(scratch))
        op = tftvm.tune(untuned, trials=2, database=database, seed=0)
    return untuned, op, database, set(glob.glob(str(scratch / "tftvm-tune-*")))  # tune_builder's


def test_tuned_op_matches_numpy_and_records_are_written(tuned, rng):
    untuned, op, database, _ = tuned
    a, b = (rng.standard_normal((32, 32)).astype(np.float32) for _ in range(2))
    np.testing.assert_allclose(op(a, b).numpy(), a @ b, rtol=1e-4, atol=1e-4)
    records = (database / "database_tuning_record.json").read_text().splitlines()
    assert records and all(json.loads(line) for line in records)


def test_the_candidates_libraries_are_deleted_after_the_tune(tuned):
    *_, left_behind = tuned
    assert left_behind == set()


def test_default_schedule_competes_with_the_searched_ones(tuned):
    from tvm.s_tir import meta_schedule as ms
    from tftvm.records import workload

    untuned, _, database, _ = tuned
    db = ms.database.JSONDatabase(work_dir=str(database), allow_missing=False)
    records = db.get_all_tuning_records()
    defaults = [r for r in records if "sample_" not in str(r.trace)]  # MetaSchedule samples tiles
    assert len(defaults) == 1 and len(records) > 1
    (best,) = db.get_top_k(db.commit_workload(workload(untuned.prim_func)), 1)
    mean = lambda r: sum(float(t) for t in r.run_secs) / len(r.run_secs)  # noqa: E731
    assert mean(best) <= mean(defaults[0])


def test_later_builds_find_the_record(tuned, monkeypatch):
    _, op, database, _ = tuned
    # Same function and name: the same tuned library (the key is its SHA-256).
    assert tftvm.op(*matmul(), name="tuned_mm", database=database).kernel.key == op.kernel.key
    monkeypatch.setenv("TFTVM_TUNING_DB", str(database))
    assert tftvm.op(*matmul(), name="tuned_mm").kernel.key == op.kernel.key
    other = tftvm.op(*matmul(16), name="mm16", database=database)  # no record: default schedule
    monkeypatch.delenv("TFTVM_TUNING_DB")
    assert other.kernel.key == tftvm.op(*matmul(16), name="mm16").kernel.key


def test_corrupt_database_is_a_clear_error(tmp_path):
    (tmp_path / "database_workload.json").write_text("{not json\n")
    (tmp_path / "database_tuning_record.json").write_text("")
    with pytest.raises(ValueError, match="tuning database .* cannot be read"):
        tftvm.op(*matmul(), name="corrupt_db", database=tmp_path)


def test_tune_refuses_what_it_cannot_tune(tuned, tmp_path):
    untuned, _, _, _ = tuned
    with pytest.raises(ValueError, match="trials must be >= 1"):
        tftvm.tune(untuned, trials=0, database=tmp_path)
    with pytest.raises(TypeError, match="takes an op made by tftvm.op"):
        tftvm.tune(lambda x: x, trials=1, database=tmp_path)


def test_symbolic_op_is_refused_with_the_reason(tmp_path):
    n = te.var("n")
    A = te.placeholder((n, 4), name="A")
    op = tftvm.op([A], [te.compute((n, 4), lambda i, j: A[i, j] * 2.0, name="B")], name="sym")
    with pytest.raises(ValueError, match="buffer 'A' has symbolic dims \\['n'\\].*give shapes="):
        tftvm.tune(op, trials=1, database=tmp_path)
    with pytest.raises(ValueError, match="time_budget must be > 0"):
        tftvm.tune(op, trials=1, database=tmp_path, time_budget=0)


def symbolic_matmul():
    n, k = te.var("n"), te.var("k")
    A, B = te.placeholder((n, k), name="A"), te.placeholder((k, 24), name="B")
    r = te.reduce_axis((0, k), name="r")
    return tftvm.op([A, B], [te.compute((n, 24), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")],
                    name="sym_mm")  # fmt: skip


def test_an_op_with_symbolic_dims_is_tuned_at_the_shapes_given(tmp_path, rng, caplog, monkeypatch):
    """Static variants at the shapes given are tuned; calls at those shapes run them, others
    the general op; all match NumPy."""
    import tensorflow as tf

    op = symbolic_matmul()
    with caplog.at_level(logging.INFO, logger="tftvm.kernel"):
        tuned = tftvm.tune(op, shapes=[[(16, 32), (32, 24)], [(8, 32), (32, 24)]], trials=4,
                           database=tmp_path / "db", seed=0)  # fmt: skip
    assert isinstance(tuned, tftvm.ShapeDispatchOp)
    assert sorted(tuned.variants) == [((8, 32), (32, 24)), ((16, 32), (32, 24))]
    assert caplog.text.count("using its tuned schedule") == 2
    # A variant more (what tune(tuned, shapes=...) starts from), untuned.
    more = tuned.with_variants([[(4, 32), (32, 24)]])
    assert len(more.variants) == 3 and more.variants[((8, 32), (32, 24))] is tuned.variants[((8, 32), (32, 24))]
    a, b = rng.standard_normal((4, 32)).astype(np.float32), rng.standard_normal((32, 24)).astype(np.float32)
    np.testing.assert_allclose(more(a, b).numpy(), a @ b, rtol=1e-4, atol=1e-4)
    calls = []  # which op each call runs
    call = tftvm.TvmOp.__call__
    monkeypatch.setattr(tftvm.TvmOp, "__call__", lambda self, *a: (calls.append(self), call(self, *a))[1])
    traced = tf.function(lambda a, b: tuned(a, b), input_signature=[tf.TensorSpec([None, 32]), tf.TensorSpec([32, 24])])
    for rows, want in ((16, "variant"), (8, "variant"), (5, "general")):
        a, b = rng.standard_normal((rows, 32)).astype(np.float32), rng.standard_normal((32, 24)).astype(np.float32)
        calls.clear()
        np.testing.assert_allclose(tuned(a, b).numpy(), a @ b, rtol=1e-4, atol=1e-4)
        assert (calls[0] is not tuned.general) == (want == "variant"), rows
        np.testing.assert_allclose(traced(a, b).numpy(), a @ b, rtol=1e-4, atol=1e-4)  # chosen in the graph


def test_a_graph_traced_with_a_none_dim_chooses_the_variant_per_call(rng):
    """A ShapeDispatchOp whose "variant" computes something else, to see which one ran: a
    tf.function traced with a None dim runs it exactly for calls at its shapes (empty inputs
    included); eager calls and static traces choose the same way."""
    import tensorflow as tf

    n = te.var("n")
    A = te.placeholder((n, 4), name="A")
    double = tftvm.op([A], [te.compute((n, 4), lambda i, j: A[i, j] * 2.0, name="B")], name="double")
    triple = tftvm.op([A], [te.compute((n, 4), lambda i, j: A[i, j] * 3.0, name="B")], name="triple")
    dispatch = tftvm.ShapeDispatchOp(double, {((3, 4),): triple})
    traced = tf.function(lambda a: dispatch(a), input_signature=[tf.TensorSpec([None, 4])])
    for rows, factor in ((3, 3.0), (5, 2.0), (0, 2.0)):
        a = rng.standard_normal((rows, 4)).astype(np.float32)
        np.testing.assert_allclose(traced(a).numpy(), a * factor, rtol=1e-6)
        np.testing.assert_allclose(dispatch(a).numpy(), a * factor, rtol=1e-6)
        np.testing.assert_allclose(tf.function(lambda a: dispatch(a))(a).numpy(), a * factor, rtol=1e-6)


def test_shapes_that_do_not_fit_the_op_are_clear_errors(tmp_path):
    op = symbolic_matmul()
    for shapes, message in (([[(16, 32)]], "takes 2 inputs; shapes= gives 1"),
                            ([[(16, 32, 1), (32, 24)]], "input 'A' has rank 2"),
                            ([[(16, 32), (30, 24)]], "dim 'k' is 32 by an earlier input and 30 by input 'B'"),
                            ([[(16, 32), (32, 25)]], "dim 1 of input 'B' is 24 = 24, shape \\(32, 25\\)")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            tftvm.tune(op, shapes=shapes, trials=1, database=tmp_path)
    with pytest.raises(TypeError, match="shapes= is for an op and a tftvm.compile_model result"):
        tftvm.tune([op, op], shapes=[[(1, 1)]], trials=1, database=tmp_path)


def test_optimized_model_is_tuned_kernel_by_kernel(tmp_path, rng):
    import tensorflow as tf

    w = tf.constant(rng.standard_normal((16, 16)).astype(np.float32))

    def model(x):
        return tf.tanh(tf.matmul(tf.nn.relu(tf.matmul(x, w) + 1.0), w))

    fast = tftvm.optimize(model, [tf.TensorSpec([8, 16])])
    seen = []
    tuned = tftvm.tune(fast, trials=2 * len(fast.kernels()), database=tmp_path / "db", seed=0,
                       progress=seen.append)  # fmt: skip
    x = rng.standard_normal((8, 16)).astype(np.float32)
    np.testing.assert_allclose(tuned(x).numpy(), model(x).numpy(), rtol=1e-4, atol=1e-4)
    assert seen and seen[-1].trials_done >= seen[-1].trials and seen[-1].tasks == len(fast.kernels())
    assert len(seen[-1].best_ms) == seen[-1].tasks  # every kernel was measured
    after = [k.kernel.key for k in tuned.kernels()]
    assert len(after) == len(fast.kernels())
    # The records (MetaSchedule's and the default schedule's) are found again by a later optimize.
    again = tftvm.optimize(model, [tf.TensorSpec([8, 16])], database=tmp_path / "db")
    assert [k.kernel.key for k in again.kernels()] == after


def test_an_optimize_result_without_a_signature_is_tuned_at_the_shapes_it_was_called_with(tmp_path, rng, caplog):
    import tensorflow as tf

    w = tf.constant(rng.standard_normal((16, 16)).astype(np.float32))

    def model(x):
        return tf.tanh(tf.matmul(x, w) + 1.0)

    adaptive = tftvm.optimize(model)
    with pytest.raises(ValueError, match="has compiled nothing yet: call it at the input shapes to tune for"):
        tftvm.tune(adaptive, trials=4, database=tmp_path / "db")
    x = rng.standard_normal((8, 16)).astype(np.float32)
    adaptive(x)  # compiles the static variant for [8, 16]
    with caplog.at_level(logging.INFO, logger="tftvm.kernel"):
        tuned = tftvm.tune(adaptive, trials=2 * len(adaptive.kernels()), database=tmp_path / "db", seed=0)
    np.testing.assert_allclose(tuned(x).numpy(), model(x).numpy(), rtol=1e-4, atol=1e-4)
    # Rebuilt with the records: every kernel of the variant took its tuned schedule.
    assert caplog.text.count("using its tuned schedule") == len(adaptive.kernels()) == len(tuned.kernels())
    y = rng.standard_normal((3, 16)).astype(np.float32)  # a new shape still compiles (symbolic, untuned)
    np.testing.assert_allclose(tuned(y).numpy(), model(y).numpy(), rtol=1e-4, atol=1e-4)


def test_time_budget_stops_after_the_first_round(tmp_path):
    ops = [tftvm.op(*matmul(8), name="budget_a"), tftvm.op(*matmul(16), name="budget_b")]
    seen = []
    tuned = tftvm.tune(ops, trials=16, database=tmp_path, seed=0, time_budget=1e-3, progress=seen.append)
    # Rounds of 16 // (2 * 2) = 4 candidates: the first round (one per task) is measured, then it stops.
    assert [p.trials_done for p in seen] == [4, 8]
    assert isinstance(tuned, list) and len(tuned) == 2


def test_time_budget_is_spent_on_the_heaviest_kernel_first(tmp_path, monkeypatch):
    import importlib

    tune_module = importlib.import_module("tftvm.tune")  # the module; tftvm.tune is the function
    # One kernel per group (4 candidates per check, 4 per kernel): the budget runs out after the first group.
    monkeypatch.setattr(tune_module, "CANDIDATES_PER_CHECK", 4)
    ops = [tftvm.op(*matmul(n), name=f"heavy_{n}") for n in (8, 32, 16)]
    seen = []
    tftvm.tune(ops, trials=24, database=tmp_path, seed=0, time_budget=1e-3, progress=seen.append)
    assert [p.trials_done for p in seen] == [4]
    assert list(seen[0].best_ms) == ["t001_heavy_32"] and seen[0].tasks == 3


def normalized_matmul():
    """(A / rowsum(A)) @ V: a reduction feeding another, where TVM 0.27 can go wrong."""
    A = te.placeholder((4, 8), name="A")
    V = te.placeholder((8, 16), name="V")
    rs, rv = te.reduce_axis((0, 8), "rs"), te.reduce_axis((0, 8), "rv")
    S = te.compute((4,), lambda i: te.sum(A[i, rs], axis=rs), name="row_sum")
    return [A, V], te.compute((4, 16), lambda i, j: te.sum(A[i, rv] / S[i] * V[rv, j], axis=rv), name="O")


def database_with_a_wrong_record(path):
    """A database at `path` whose fastest record for a normalized matmul computes wrong
    results: (the untuned op, its workload module, the target)."""
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms
    from tftvm.kernel import resolve_target
    from tftvm.records import workload
    from tftvm.schedule import default_cpu_trace

    untuned = tftvm.op(*normalized_matmul(), name="norm_mm")
    mod, target = workload(untuned.prim_func), resolve_target(None)
    # MetaSchedule's postprocessing does this to fused attention: the row sum computed
    # inside O's reduction loop, its init hoisted out of that loop (apache/tvm#14791).
    wrong = s_tir.Schedule(mod)
    i, j, r = wrong.get_loops(wrong.get_sblock("O"))
    wrong.compute_at(wrong.get_sblock("row_sum"), r)
    wrong.decompose_reduction(wrong.get_sblock("row_sum"), wrong.get_loops(wrong.get_sblock("row_sum"))[2])
    path.mkdir(parents=True, exist_ok=True)
    db = ms.database.JSONDatabase(work_dir=str(path))
    entry, args = db.commit_workload(mod), ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    db.commit_tuning_record(ms.database.TuningRecord(wrong.trace, entry, [1e-6], target, args))  # "fastest"
    db.commit_tuning_record(ms.database.TuningRecord(default_cpu_trace(mod).trace, entry, [1e-3], target, args))
    return untuned, mod, target


def assert_only_the_right_record_is_left(path, mod, rng):
    from tvm.s_tir import meta_schedule as ms
    from tftvm.schedule import default_cpu_trace

    records = ms.database.JSONDatabase(work_dir=str(path), allow_missing=False).get_all_tuning_records()
    assert [str(r.trace) for r in records] == [str(default_cpu_trace(mod).trace)]
    a = rng.random((4, 8)).astype(np.float32) + 0.5
    v = rng.standard_normal((8, 16)).astype(np.float32)
    checked = tftvm.op(*normalized_matmul(), name="norm_mm", database=path)
    np.testing.assert_allclose(checked(a, v).numpy(), (a / a.sum(axis=1, keepdims=True)) @ v, rtol=1e-5, atol=1e-5)


def test_a_record_that_computes_wrong_results_is_dropped(tmp_path, rng):
    from tftvm.records import drop_wrong_records

    untuned, mod, target = database_with_a_wrong_record(tmp_path)
    a = rng.random((4, 8)).astype(np.float32) + 0.5
    v = rng.standard_normal((8, 16)).astype(np.float32)
    expected = (a / a.sum(axis=1, keepdims=True)) @ v
    trusting = tftvm.op(*normalized_matmul(), name="norm_mm", database=tmp_path)
    assert not np.allclose(trusting(a, v).numpy(), expected, atol=1e-3), "TVM no longer miscompiles this"

    assert drop_wrong_records({"norm_mm": untuned.prim_func}, target, tmp_path) == 1
    assert_only_the_right_record_is_left(tmp_path, mod, rng)
    assert drop_wrong_records({"norm_mm": untuned.prim_func}, target, tmp_path) == 0  # nothing left to drop


def own_matmul_schedule(sch):
    """A hand schedule: rows in parallel, 16 columns at a time in a vector."""
    i, j, r = sch.get_loops(sch.get_sblock("C"))
    jo, ji = sch.split(j, [None, 16])
    sch.reorder(i, jo, r, ji)
    sch.parallel(i)
    sch.vectorize(ji)


def test_own_schedule_is_compiled_and_competes_in_tuning(tmp_path, rng):
    from tvm.s_tir import meta_schedule as ms
    from tftvm.records import workload
    from tftvm.schedule import custom_trace

    a, b = (rng.standard_normal((32, 32)).astype(np.float32) for _ in range(2))
    own = tftvm.op(*matmul(), name="own_mm", schedule=own_matmul_schedule)
    np.testing.assert_allclose(own(a, b).numpy(), a @ b, rtol=1e-4, atol=1e-4)
    assert own.kernel.key != tftvm.op(*matmul(), name="own_mm").kernel.key  # not the default schedule
    tuned = tftvm.tune(own, trials=1, database=tmp_path, seed=0)
    np.testing.assert_allclose(tuned(a, b).numpy(), a @ b, rtol=1e-4, atol=1e-4)
    traces = [str(r.trace) for r in ms.database.JSONDatabase(work_dir=str(tmp_path)).get_all_tuning_records()]
    assert str(custom_trace(workload(own.prim_func), own_matmul_schedule).trace) in traces


def test_bad_schedule_arguments_are_clear_errors():
    with pytest.raises(TypeError, match="schedule must be True, False or a function"):
        tftvm.op(*matmul(), name="bad_schedule", schedule="fast")

    def broken(sch):
        sch.get_sblock("no_such_block")

    with pytest.raises(ValueError, match="schedule function broken failed on 'bad_schedule'"):
        tftvm.op(*matmul(), name="bad_schedule", schedule=broken)


def test_compiled_model_is_tuned_at_concrete_shapes(tmp_path, rng):
    """A None-batch model tuned at batch 1: a static program with tuned kernels serves
    batch 1, the general program every other batch, and a later compile_model finds the
    records again."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    inp = keras.Input((6, 6, 3))
    h = keras.layers.Conv2D(4, 3, activation="relu")(inp)
    model = keras.Model(inp, keras.layers.Dense(5)(keras.layers.Flatten()(h)))
    signature = [tf.TensorSpec([None, 6, 6, 3])]
    compiled = tftvm.compile_model(model, signature)
    assert not compiled.statics and compiled.tuned_kernels == 0
    tuned = tftvm.tune(compiled, trials=2, database=tmp_path / "db", seed=0)
    (program,) = tuned.statics.values()
    assert program.shapes == ((1, 6, 6, 3),) and program.tuned == program.kernels > 0
    for batch in (1, 3, 1):
        x = rng.standard_normal((batch, 6, 6, 3)).astype(np.float32)
        np.testing.assert_allclose(tuned(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)
    assert program.calls == 2 and tuned.calls == 3
    assert f"{program.kernels} kernels, {program.kernels} tuned; ran 2 of the calls" in tuned.report()
    # The records serve later builds: a static signature's general program, or specialize=.
    static = tftvm.compile_model(model, [tf.TensorSpec([1, 6, 6, 3])], database=tmp_path / "db")
    assert static.tuned_kernels == program.kernels and not static.statics
    again = tftvm.compile_model(model, signature, database=tmp_path / "db", specialize=[(1, 6, 6, 3), (2, 6, 6, 3)])
    assert [p.tuned for p in again.statics.values()] == [program.kernels, 0]
    with pytest.raises(ValueError, match=r"shapes= takes sets of input shapes, one shape per input.*\(8, 8\)"):
        tftvm.tune(tftvm.op(*matmul(8), name="shapes_mm"), trials=1, database=tmp_path, shapes=[(8, 8)])
    with pytest.raises(ValueError, match=r"shapes: shape \(1, 5, 6, 3\) does not fit input 0"):
        tftvm.tune(compiled, trials=1, database=tmp_path, shapes=[(1, 5, 6, 3)])
    loaded = tftvm.load_model(tuned.export(tmp_path / "export"))
    x = rng.standard_normal((1, 6, 6, 3)).astype(np.float32)
    np.testing.assert_allclose(loaded(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)
    assert loaded.statics[((1, 6, 6, 3),)].calls == 1
    with pytest.raises(TypeError, match="loaded from an export, which keeps no TVM IR"):
        tftvm.tune(loaded, trials=1, database=tmp_path)


def test_a_record_is_used_only_for_the_target_it_was_measured_for(tmp_path):
    """A database shared by machines holds records of several CPUs: a kernel built for one
    must not take a schedule measured on another (MetaSchedule's own query would)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tftvm.records import tuned_schedule, workload
    from tftvm.schedule import default_cpu_trace

    A = te.placeholder((64,), "float32", name="A")
    func = te.create_prim_func([A, te.compute((64,), lambda i: A[i] * 2.0, name="B")])
    measured_on = tvm.target.Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    db = ms.database.JSONDatabase(work_dir=str(tmp_path))
    db.commit_tuning_record(ms.database.TuningRecord(default_cpu_trace(workload(func)).trace,
                                                     db.commit_workload(workload(func)), [1e-6], measured_on,
                                                     ms.arg_info.ArgInfo.from_prim_func(func)))  # fmt: skip
    assert tuned_schedule(func, tvm.target.Target({"kind": "llvm", "mcpu": "znver4"}), tmp_path) is not None
    assert tuned_schedule(func, tvm.target.Target({"kind": "llvm", "mcpu": "skylake"}), tmp_path) is None
