"""Checks the @{op_type} op built in this directory against @{against}.

Build the op first (./build.sh, or CMake as the README shows), then run
`python test_@{name}.py` or `pytest test_@{name}.py`. Only TensorFlow and NumPy are
needed: the op library brings its own TVM runtime.
"""
import os

import numpy as np
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
op = tf.load_op_library(os.path.join(HERE, "@{op_library}")).@{name}

# The inputs' dtypes, and the outputs' shapes as TF infers them when every
# symbolic dim of the inputs is unknown (None).
INPUT_DTYPES = @{input_dtypes}
OUTPUT_DTYPES = @{output_dtypes}
INPUT_SPECS = @{input_specs}
OUTPUT_SHAPES = @{output_shapes}
RTOL = {"float16": 1e-2, "bfloat16": 5e-2, "float32": 1e-4, "float64": 1e-10}


@{reference}


def load_case():
    """Test inputs saved by tftvm codegen (shapes that fit the op) and their expected outputs."""
    data = np.load(os.path.join(HERE, "@{testdata}"))
    inputs = [tf.constant(data[f"input{i}"], dtype=d) for i, d in enumerate(INPUT_DTYPES)]
    return inputs, expected_outputs(data)


def assert_matches(outputs, expected):
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    assert len(outputs) == len(expected)
    for got, want, dtype in zip(outputs, expected, OUTPUT_DTYPES):
        got = got.numpy().astype(np.float64) if dtype != "bool" else got.numpy()
        want = np.asarray(want).astype(got.dtype)
        assert got.shape == want.shape, (got.shape, want.shape)
        rtol = RTOL.get(dtype, 0)
        atol = rtol * max(1.0, float(np.abs(want).max(initial=0)))
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def test_eager_call_matches():
    inputs, expected = load_case()
    assert_matches(op(*inputs), expected)


def test_tf_function_infers_shapes_and_matches():
    inputs, expected = load_case()
    f = tf.function(op, input_signature=[tf.TensorSpec(s, d) for s, d in zip(INPUT_SPECS, INPUT_DTYPES)])
    outputs = f.get_concrete_function().structured_outputs
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    assert [o.shape.as_list() for o in outputs] == OUTPUT_SHAPES
    assert_matches(f(*inputs), expected)


def test_a_wrong_rank_is_an_invalid_argument_error():
    inputs, _ = load_case()
    inputs[0] = tf.expand_dims(inputs[0], 0)  # one dim too many
    try:
        op(*inputs)
    except tf.errors.InvalidArgumentError as err:
        assert "@{bad_rank_arg}" in str(err), err
    else:
        raise AssertionError("a wrong rank was not refused")


if __name__ == "__main__":
    tests = [test_eager_call_matches, test_tf_function_infers_shapes_and_matches,
             test_a_wrong_rank_is_an_invalid_argument_error]
    for test in tests:
        test()
    print(f"@{op_type}: {len(tests)} tests passed")
