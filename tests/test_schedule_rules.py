"""The default schedule's rules one by one: which rule takes which kind of block (the first
of RULES that matches), and that the kernel it schedules computes what NumPy computes."""
import numpy as np
import pytest
import tftvm
import tvm
from tftvm.schedule import RULES, schedule_block
from tvm import s_tir, te


def matmul():
    A, B = te.placeholder((64, 48), name="A"), te.placeholder((48, 64), name="B")
    r = te.reduce_axis((0, 48), name="r")
    C = te.compute((64, 64), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return [A, B], C, lambda a, b: a @ b


def matmul_by_transposed():
    A, B = te.placeholder((256, 64), name="A"), te.placeholder((256, 64), name="B")
    r = te.reduce_axis((0, 64), name="r")
    C = te.compute((256, 256), lambda i, j: te.sum(A[i, r] * B[j, r], axis=r), name="C")
    return [A, B], C, lambda a, b: a @ b.T


def row_sums():
    A = te.placeholder((64, 128), name="A")
    r = te.reduce_axis((0, 128), name="r")
    return [A], te.compute((64,), lambda i: te.sum(A[i, r], axis=r), name="S"), lambda a: a.sum(axis=1)


def column_sums():
    A = te.placeholder((16, 8, 64), name="A")
    b, t = te.reduce_axis((0, 16), name="b"), te.reduce_axis((0, 8), name="t")
    return [A], te.compute((64,), lambda c: te.sum(A[b, t, c], axis=[b, t]), name="S"), lambda a: a.sum(axis=(0, 1))


def transpose():
    A = te.placeholder((64, 32), name="A")
    return [A], te.compute((32, 64), lambda i, j: A[j, i], name="T"), lambda a: a.T


def elementwise():
    A, B = te.placeholder((64, 48), name="A"), te.placeholder((48,), name="B")
    return [A, B], te.compute((64, 48), lambda i, j: A[i, j] * 2.0 + B[j], name="E"), lambda a, b: a * 2 + b


@pytest.mark.parametrize("workload, rule", [
    (matmul, "register tiles"),
    (matmul_by_transposed, "transposed operand"),
    (row_sums, "dot products"),
    (column_sums, "column sums"),
    (transpose, "tiled transpose"),
    (elementwise, "parallel loops"),
])  # fmt: skip
def test_each_rule_takes_its_kind_of_block_and_computes_what_numpy_does(workload, rule, rng):
    inputs, output, reference = workload()
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([*inputs, output])}))
    (block,) = sch.get_child_blocks(sch.get_sblock("root"))
    assert schedule_block(sch, block) == rule
    op = tftvm.op(inputs, [output], name=f"rule_{workload.__name__}")
    args = [rng.standard_normal([int(d) for d in t.shape]).astype(np.float32) for t in inputs]
    np.testing.assert_allclose(op(*args).numpy(), reference(*args), rtol=1e-4, atol=1e-4)


def test_a_block_no_rule_matches_is_left_as_it_is():
    inputs, output, _ = elementwise()
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([*inputs, output])}))
    (block,) = sch.get_child_blocks(sch.get_sblock("root"))
    before = sch.mod.script()
    assert schedule_block(sch, block, rules=[r for r in RULES if r.name != "parallel loops"]) is None
    assert sch.mod.script() == before


def test_the_rules_are_tried_in_their_documented_order():
    assert [r.name for r in RULES] == ["register tiles", "transposed operand", "dot products", "column sums",
                                       "tiled transpose", "parallel loops"]  # fmt: skip


def test_a_decode_steps_single_row_takes_its_batch_as_the_tiles_rows(rng):
    """[batch, 1 token, K] · W: tiles run over the batch (B does not index it), so that the
    eight rows of a tile share each vector of W rather than reading all of W once per row."""
    A, B = te.placeholder((8, 1, 96), name="A"), te.placeholder((96, 64), name="B")
    r = te.reduce_axis((0, 96), name="r")
    C = te.compute((8, 1, 64), lambda b, i, j: te.sum(A[b, i, r] * B[r, j], axis=r), name="C")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, B, C])}))
    (block,) = sch.get_child_blocks(sch.get_sblock("root"))
    assert schedule_block(sch, block) == "register tiles"
    unrolled = [loop for loop in sch.get_loops(sch.get_sblock("C_update"))
                if sch.get(loop).kind == tvm.tirx.ForKind.UNROLLED]  # fmt: skip
    assert [int(sch.get(loop).extent) for loop in unrolled] == [8]  # a tile's rows: the batch
    op = tftvm.op([A, B], [C], name="rule_decode_step")
    a, b = rng.standard_normal((8, 1, 96)).astype(np.float32), rng.standard_normal((96, 64)).astype(np.float32)
    np.testing.assert_allclose(op(a, b).numpy(), a @ b, rtol=1e-4, atol=1e-4)
