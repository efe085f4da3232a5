"""A differential fuzzer for the converters: random small TF graphs through TF and tftvm.

A hypothesis strategy (`cases`) draws a graph built from the converter table's ops (a
`Recipe`: inputs with their dtypes and shapes, some dims `None` or 0, then a few steps, each
an op on earlier values) and the values to feed it (NaN, +-inf, +-0, denormals, int
extremes among them). `differences` runs the graph in TF (a tf.function) and through
`tftvm.optimize`, `tftvm.compile_model` and `tftvm.enable()` (every cluster in TVM, no
safety net), and names each output where a path differs from TF beyond the dtype's
tolerance, or where one raises and the other does not. A failing case prints as a small
program (`str(recipe)`), which hypothesis shrinks first.

Graphs come in two styles: TF2's (a tf.function) and, one in four, TF1's: the steps inside a
TF1 `tf.while_loop` of LOOP_STEPS iterations (control flow v1: Enter/Merge/Switch/Exit
nodes) whose outputs each iteration writes into TF1 TensorArrays, stacked after the loop, in
a v1 graph run as TF2 code runs one (`tf.compat.v1.wrap_function` importing its GraphDef).
That style goes through tftvm's making TF1 control flow functional and its arrays lists.

tests/test_graph_fuzz.py runs a few dozen cases; `python benchmarks/stress.py --part graphs
--cases N` runs many.
"""
from __future__ import annotations

import dataclasses

import numpy as np

F32, I32, BOOL = "float32", "int32", "bool"
TF1_LOOP = "tf1_loop"  # the style of a graph built as TF1 code builds one (see the module's docstring)
LOOP_STEPS = 2


@dataclasses.dataclass(frozen=True)
class Op:
    """A step: `build(*tensors, param)` on operands of `takes` dtypes; `param` is drawn from
    `params` (None: no parameter). `keeps_shape`: the output has its first operand's shape
    (else `shape(shape, param)` gives it), of dtype `gives` (None: the first operand's)."""

    takes: tuple
    build: object
    gives: str | None = None
    params: tuple = (None,)
    shape: object = None
    min_rank: int = 0
    axis: bool = False  # param is an axis of the first operand


def _tf():
    import tensorflow as tf

    return tf


def _unary(name):
    return lambda x, p: getattr(_tf().math, name)(x)


def _reduced(shape, axis):
    return shape[:axis] + shape[axis + 1:]


def _ops() -> dict:
    tf = _tf()
    ops = {}
    for name in ("abs", "negative", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "sin", "cos", "tan",
                 "atan", "asinh", "floor", "ceil", "round", "sign", "square", "erf", "log1p", "expm1",
                 "reciprocal", "softplus", "is_nan", "is_inf", "is_finite"):  # fmt: skip
        gives = BOOL if name.startswith("is_") else None
        ops[name] = Op((F32,), _unary(name), gives)
    ops.update({
        "relu": Op((F32,), lambda x, p: tf.nn.relu(x)),
        "relu6": Op((F32,), lambda x, p: tf.nn.relu6(x)),
        "elu": Op((F32,), lambda x, p: tf.nn.elu(x)),
        "selu": Op((F32,), lambda x, p: tf.nn.selu(x)),
        "softsign": Op((F32,), lambda x, p: tf.nn.softsign(x)),
        "leaky_relu": Op((F32,), lambda x, p: tf.nn.leaky_relu(x, 0.2)),
        "clip": Op((F32,), lambda x, p: tf.clip_by_value(x, -1.5, 2.0)),
        "cast_to_int": Op((F32,), lambda x, p: tf.cast(tf.clip_by_value(tf.where(tf.math.is_nan(x), 0.0, x), -1e6, 1e6),
                                                         tf.int32), I32),  # fmt: skip
        "cast_to_bool": Op((F32,), lambda x, p: tf.cast(x, tf.bool), BOOL),
        "int_to_float": Op((I32,), lambda x, p: tf.cast(x, tf.float32), F32),
        "bool_to_float": Op((BOOL,), lambda x, p: tf.cast(x, tf.float32), F32),
        "logical_not": Op((BOOL,), lambda x, p: tf.logical_not(x)),
        "int_abs": Op((I32,), lambda x, p: tf.abs(x)),
        "int_negative": Op((I32,), lambda x, p: tf.negative(x)),
        "invert": Op((I32,), lambda x, p: tf.bitwise.invert(x)),
    })
    # Not atan2: TF's (Eigen's) gives pi/4 for denormal pairs and for atan2(1e-40, 0), libm's
    # and TVM's NaN or pi/2; tests/test_convert_edges.py checks it away from denormals.
    for name in ("add", "subtract", "multiply", "divide", "maximum", "minimum", "pow", "floordiv", "floormod",
                 "squared_difference", "divide_no_nan", "truncatemod"):  # fmt: skip
        fn = getattr(tf.math, name, None) or getattr(tf, name)
        ops[name] = Op((F32, F32), (lambda f: lambda x, y, p: f(x, y))(fn))
    for name in ("greater", "less_equal", "equal", "not_equal"):
        ops[name] = Op((F32, F32), (lambda f: lambda x, y, p: f(x, y))(getattr(tf.math, name)), BOOL)
    for name in ("add", "subtract", "multiply", "maximum", "minimum", "equal", "greater"):
        gives = BOOL if name in ("equal", "greater") else None
        ops[f"int_{name}"] = Op((I32, I32), (lambda f: lambda x, y, p: f(x, y))(getattr(tf.math, name)), gives)
    for name in ("bitwise_and", "bitwise_xor", "left_shift", "right_shift"):
        ops[name] = Op((I32, I32), (lambda f: lambda x, y, p: f(x, y))(getattr(tf.bitwise, name)))
    for name in ("floordiv", "floormod", "truncatediv", "truncatemod"):
        fn = getattr(tf.math, name, None) or getattr(tf, name)
        ops[f"int_{name}_by"] = Op((I32,), (lambda f: lambda x, p: f(x, tf.constant(p, tf.int32)))(fn),
                                   params=(-7, -1, 3, 2**31 - 1))  # fmt: skip
    for name in ("logical_and", "logical_or", "logical_xor"):
        ops[name] = Op((BOOL, BOOL), (lambda f: lambda x, y, p: f(x, y))(getattr(tf.math, name)))
    ops["bool_equal"] = Op((BOOL, BOOL), lambda x, y, p: tf.equal(x, y))
    ops["select"] = Op((BOOL, F32, F32), lambda c, x, y, p: tf.where(c, x, y), F32)
    ops["int_select"] = Op((BOOL, I32, I32), lambda c, x, y, p: tf.where(c, x, y), I32)

    def along(fn, gives=None, takes=F32, keeps=True):
        shape = None if keeps else _reduced
        return Op((takes,), fn, gives, params=(0, 1, 2), shape=shape, min_rank=1, axis=True)

    for name in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_euclidean_norm"):
        ops[name] = along((lambda f: lambda x, p: f(x, axis=p))(getattr(tf.math, name)), keeps=False)
    for name in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod"):
        ops[f"int_{name}"] = along((lambda f: lambda x, p: f(x, axis=p))(getattr(tf.math, name)), takes=I32, keeps=False)
    ops["reduce_all"] = along(lambda x, p: tf.reduce_all(x, axis=p), takes=BOOL, keeps=False)
    ops["reduce_any"] = along(lambda x, p: tf.reduce_any(x, axis=p), takes=BOOL, keeps=False)
    ops["argmax"] = along(lambda x, p: tf.cast(tf.argmax(x, axis=p), tf.int32), gives=I32, keeps=False)
    ops["argmin"] = along(lambda x, p: tf.cast(tf.argmin(x, axis=p), tf.int32), gives=I32, keeps=False)
    ops["cumsum"] = along(lambda x, p: tf.math.cumsum(x, axis=p))
    ops["cumprod"] = along(lambda x, p: tf.math.cumprod(x, axis=p, reverse=True))
    ops["int_cumsum"] = along(lambda x, p: tf.math.cumsum(x, axis=p, exclusive=True), takes=I32)
    ops["reverse"] = along(lambda x, p: tf.reverse(x, [p]))
    ops["roll"] = along(lambda x, p: tf.roll(x, 2, p))
    # TF's default softmax (oneDNN) gives rows holding NaN or inf NaN here and 0 there by where
    # they fall in its vectors; tftvm gives NaN throughout as TF's Eigen kernel does. Finite rows only.
    ops["softmax"] = Op((F32,), lambda x, p: tf.nn.softmax(tf.where(tf.math.is_finite(x), x, 0.0)), min_rank=1)
    ops["log_softmax"] = Op((F32,), lambda x, p: tf.nn.log_softmax(x), min_rank=1)
    ops["transpose"] = Op((None,), lambda x, p: tf.transpose(x), shape=lambda s, p: s[::-1], min_rank=2)
    ops["flatten"] = Op((None,), lambda x, p: tf.reshape(x, [-1]), shape=lambda s, p: (int(np.prod(s)),))
    ops["every_other"] = Op((None,), lambda x, p: x[..., ::2], shape=lambda s, p: s[:-1] + ((s[-1] + 1) // 2,),
                            min_rank=1)  # fmt: skip
    ops["pad"] = Op((None,), lambda x, p: tf.pad(x, [[1, 0]] * len(x.shape)), shape=lambda s, p: tuple(d + 1 for d in s),
                    min_rank=1)  # fmt: skip
    ops["concat"] = Op((None, None), lambda x, y, p: tf.concat([x, y], 0), shape=lambda s, p: (2 * s[0],) + s[1:],
                       min_rank=1)  # fmt: skip
    return ops


OPS: dict = {}


def ops() -> dict:
    if not OPS:
        OPS.update(_ops())
    return OPS


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A graph: `inputs` (dtype, static shape, first dim None in the signature), then `steps`
    (op name, operand value indices, param), then `outputs` (value indices)."""

    inputs: tuple
    steps: tuple
    outputs: tuple
    style: str = "tf2"  # or TF1_LOOP

    def __str__(self) -> str:
        lines = [f"# TF1: the steps in a tf.while_loop of {LOOP_STEPS}, outputs stacked by TensorArrays"] \
            if self.style == TF1_LOOP else []  # fmt: skip
        lines += [f"v{i} = input({d}, {list(s)}{', None first' if n else ''})" for i, (d, s, n) in enumerate(self.inputs)]
        for k, (op, operands, param) in enumerate(self.steps, len(self.inputs)):
            args = ", ".join(f"v{i}" for i in operands) + ("" if param is None else f", {param}")
            lines.append(f"v{k} = {op}({args})")
        lines.append("return " + ", ".join(f"v{i}" for i in self.outputs))
        return "\n".join(lines)

    @classmethod
    def parse(cls, text: str) -> Recipe:
        """The Recipe that printed as `text` (str's inverse): a listed difference, replayed."""
        import ast
        import re

        style = TF1_LOOP if text.startswith("# TF1") else "tf2"
        inputs, steps, outputs = [], [], ()
        for line in (ln.strip() for ln in text.splitlines()):
            if not line or line.startswith("#"):
                continue
            if line.startswith("return "):
                outputs = tuple(int(v.strip()[1:]) for v in line[len("return "):].split(","))
            elif m := re.fullmatch(r"v\d+ = input\((\w+), (\[[^]]*\])(, None first)?\)", line):
                inputs.append((m.group(1), tuple(ast.literal_eval(m.group(2))), m.group(3) is not None))
            elif m := re.fullmatch(r"v\d+ = (\w+)\((.*)\)", line):
                args = [a.strip() for a in m.group(2).split(",") if a.strip()]
                operands = tuple(int(a[1:]) for a in args if re.fullmatch(r"v\d+", a))
                rest = [a for a in args if not re.fullmatch(r"v\d+", a)]
                steps.append((m.group(1), operands, ast.literal_eval(", ".join(rest)) if rest else None))
            else:
                raise ValueError(f"not a line of a printed graph: {line!r}")
        return cls(tuple(inputs), tuple(steps), outputs, style)

    def feeds(self, values) -> list:
        """`values` (nested lists, as a listed difference keeps them) as arrays of the inputs'
        dtypes and shapes."""
        return [np.array(v, dtype=d).reshape(s) for v, (d, s, _) in zip(values, self.inputs)]

    def function(self):
        """The graph as TF2 code calls it: a Python function of tensors (TF2's style), or a
        wrapped function of the TF1 graph (TF1_LOOP)."""
        table = ops()

        def fn(*args):
            values = list(args)
            for op, operands, param in self.steps:
                values.append(table[op].build(*[values[i] for i in operands], param))
            return [values[i] for i in self.outputs]

        return fn if self.style != TF1_LOOP else _tf1_loop(fn, self.signature(), len(self.outputs))

    def signature(self):
        tf = _tf()
        return [tf.TensorSpec(((None,) + s[1:]) if none else s, d) for d, s, none in self.inputs]


SPECIAL_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e-40, -1e-40, 1e-30, 3e38, -3e38, np.inf, -np.inf, np.nan, 88.7,
                  -104.0, 1e5]  # fmt: skip
SPECIAL_INTS = [0, 1, -1, 2, 31, 32, 2**31 - 1, -(2**31), 7, -7, 100]


def _tf1_loop(fn, signature, outputs: int):
    """`fn` run LOOP_STEPS times in a TF1 while loop of a v1 graph, each output of each
    iteration written into a TF1 TensorArray, stacked after it; the graph imported into a
    wrapped function of `signature`."""
    tf = _tf()
    tf.compat.v1.disable_control_flow_v2()
    try:
        graph = tf.Graph()
        with graph.as_default():
            inputs = [tf.compat.v1.placeholder(s.dtype, s.shape, name=f"in{i}") for i, s in enumerate(signature)]
            probe = fn(*inputs)  # the outputs' dtypes, for the arrays
            arrays = [tf.TensorArray(t.dtype, size=LOOP_STEPS) for t in probe]

            def body(t, *arrays):
                return (t + 1, *[a.write(t, y) for a, y in zip(arrays, fn(*inputs))])

            _, *arrays = tf.while_loop(lambda t, *a: t < LOOP_STEPS, body, [tf.constant(0), *arrays])
            results = [tf.identity(a.stack(), name=f"out{k}") for k, a in enumerate(arrays)]
        graph_def = graph.as_graph_def()
    finally:
        tf.compat.v1.enable_control_flow_v2()
    names = [r.name for r in results]
    return tf.compat.v1.wrap_function(
        lambda *xs: tf.graph_util.import_graph_def(graph_def, input_map={f"in{i}:0": x for i, x in enumerate(xs)},
                                                   return_elements=names), signature)  # fmt: skip


def cases(max_steps: int = 5):
    """A hypothesis strategy of (Recipe, feeds): the feeds a list of NumPy arrays."""
    from hypothesis import strategies as st

    @st.composite
    def draw(data):
        table = ops()
        rank = data(st.integers(0, 3))
        shape = tuple(data(st.lists(st.sampled_from([0, 1, 2, 3, 5]), min_size=rank, max_size=rank)))
        count = data(st.integers(1, 3))
        inputs = tuple((data(st.sampled_from([F32, F32, I32, BOOL])), shape, rank > 0 and data(st.booleans()))
                       for _ in range(count))  # fmt: skip
        values = [(d, s) for d, s, _ in inputs]
        steps = []
        for _ in range(data(st.integers(1, max_steps))):
            name = data(st.sampled_from(sorted(table)))
            op = table[name]
            picked = _operands(data, st, op, values)
            if picked is None:
                continue
            param = data(st.sampled_from(op.params))
            first = values[picked[0]]
            if op.axis:
                param = min(param, len(first[1]) - 1)
            out_shape = first[1] if op.shape is None else op.shape(first[1], param)
            steps.append((name, tuple(picked), param))
            values.append((op.gives or first[0], tuple(out_shape)))
        if not steps:
            return None
        produced = list(range(len(inputs), len(values)))
        outputs = tuple(sorted(set(data(st.lists(st.sampled_from(produced), min_size=1, max_size=2)))))
        style = data(st.sampled_from(["tf2", "tf2", "tf2", TF1_LOOP]))
        recipe = Recipe(inputs, tuple(steps), outputs, style)
        feeds = [_values(data, st, d, s) for d, s, _ in inputs]
        return recipe, feeds

    return draw().filter(lambda case: case is not None)


def _operands(data, st, op, values):
    picked = []
    for k, dtype in enumerate(op.takes):
        if k == 0:
            choices = [i for i, (d, s) in enumerate(values)
                       if (dtype is None or d == dtype) and len(s) >= op.min_rank]  # fmt: skip
        else:  # later operands: the first one's shape (elementwise, concat)
            want = values[picked[0]][1]
            choices = [i for i, (d, s) in enumerate(values) if (dtype is None or d == dtype) and s == want]
            if dtype is None:
                choices = [i for i in choices if values[i][0] == values[picked[0]][0]]
        if not choices:
            return None
        picked.append(data(st.sampled_from(choices)))
    return picked


def _values(data, st, dtype, shape):
    n = int(np.prod(shape)) if shape else 1
    if dtype == F32:
        element = st.one_of(st.sampled_from(SPECIAL_FLOATS), st.floats(-10, 10, width=32),
                            st.floats(width=32, allow_subnormal=True))  # fmt: skip
        flat = data(st.lists(element, min_size=n, max_size=n))
        return np.array(flat, np.float32).reshape(shape)
    if dtype == I32:
        element = st.one_of(st.sampled_from(SPECIAL_INTS), st.integers(-20, 20), st.integers(-(2**31), 2**31 - 1))
        return np.array(data(st.lists(element, min_size=n, max_size=n)), np.int32).reshape(shape)
    return np.array(data(st.lists(st.booleans(), min_size=n, max_size=n)), bool).reshape(shape)


def close(got, want, dtype: str) -> bool:
    """Equal for ints and bools; for floats the same NaNs and infinities and otherwise within
    1e-4 relative (chains of transcendental ops round differently) or 1e-5 absolute."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if dtype != F32:
        return np.array_equal(got, want)
    if not np.array_equal(np.isnan(got), np.isnan(want)):
        return False
    finite = np.isfinite(want) & np.isfinite(got)
    if not np.array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)]):
        return False
    return bool(np.all(np.abs(got[finite] - want[finite]) <= 1e-5 + 1e-4 * np.abs(want[finite])))


PATHS = ("optimize", "compile_model", "enable")


def run_path(path: str, recipe: Recipe, feeds):
    """The outputs of `recipe` on `feeds` through tftvm's `path`, every cluster in TVM."""
    import tftvm

    tf = _tf()
    fn, signature = recipe.function(), recipe.signature()
    traced = fn if recipe.style == TF1_LOOP else tf.function(fn, autograph=False)  # a wrapped function already
    if path == "optimize":
        return tftvm.optimize(traced, signature, keep_faster=False, min_cluster_size=1)(*feeds)
    if path == "compile_model":
        return tftvm.compile_model(traced, signature, keep_faster=False)(*feeds)
    with tftvm.enabled(keep_faster=False, min_cluster_size=1):
        return tf.function(lambda *xs: fn(*xs), input_signature=signature, autograph=False)(*feeds)


def _in_tf(recipe: Recipe, feeds, graph: bool):
    """TF's outputs (NumPy arrays), or the name of the error TF raised: op by op (eager, TF's
    kernels) or as a tf.function (the graph Grappler optimized)."""
    tf = _tf()
    fn = recipe.function()
    if graph and recipe.style != TF1_LOOP:  # a TF1 graph is a graph either way
        fn = tf.function(fn, input_signature=recipe.signature(), autograph=False)
    try:
        return [np.asarray(w) for w in fn(*[tf.constant(f) for f in feeds])]
    except (tf.errors.OpError, ValueError) as err:
        return type(err).__name__


def differences(recipe: Recipe, feeds, paths=PATHS) -> list[str]:
    """What differs from TF, one line per path and output; empty where every path agrees.
    TF is its kernels run op by op; where TF's own graph (a tf.function, which Grappler
    rewrites, and which leaves out what no output needs) gives another answer, that one is
    accepted too (over no elements Grappler folds a Max to 0 where the kernel gives -inf),
    and so is TF's answer with denormal inputs read as zeros: TF's pool threads run with
    denormals-are-zero and its caller's thread without, so log(1e-40) is -inf or -103.97 in
    TF by which thread runs it; tftvm's kernels read them as zeros in every thread."""
    eager = _in_tf(recipe, feeds, graph=False)
    graph = flushed = None
    if isinstance(eager, str):  # an op no output needs may raise op by op; a graph prunes it
        eager = graph = _in_tf(recipe, feeds, graph=True)
    found = []
    for path in paths:
        try:
            got = [np.asarray(g) for g in _tf().nest.flatten(run_path(path, recipe, feeds))]
        except Exception as err:  # noqa: BLE001 - a path's failure is a finding, unless TF fails too
            if not isinstance(eager, str):
                found.append(f"{path}: raised {type(err).__name__}: {str(err)[:300]}; TF did not")
            continue
        if isinstance(eager, str):
            found.append(f"{path}: returned values; TF raised {eager}")
            continue
        for k, (g, w) in enumerate(zip(got, eager)):
            if _close(g, w):
                continue
            graph = _in_tf(recipe, feeds, graph=True) if graph is None else graph
            flushed = _in_tf(recipe, [_flushed(f) for f in feeds], graph=False) if flushed is None else flushed
            if any(not isinstance(r, str) and _close(g, r[k]) for r in (graph, flushed)):
                continue
            found.append(f"{path}: output {k} ({w.dtype}{list(w.shape)}) differs:\n  tftvm {g!r}\n  TF    {w!r}")
    return found


def _flushed(array):
    """`array` with its float denormals as zeros of their sign."""
    if array.dtype != np.float32:
        return array
    tiny = np.finfo(np.float32).tiny
    return np.where(np.abs(array) < tiny, np.copysign(np.float32(0), array), array).astype(np.float32)


def _close(got, want) -> bool:
    return close(got, want, F32 if want.dtype == np.float32 else str(want.dtype))
