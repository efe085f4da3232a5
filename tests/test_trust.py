"""The embedded-module policy: a process can refuse the native code that graphs carry."""
import numpy as np
import pytest
import tensorflow as tf
import tftvm

from conftest import ROOT, run_python

CALL = """
import numpy as np, tensorflow as tf, tftvm
{setup}
m = tf.saved_model.load({path!r})
try:
    print("RAN", m.f(tf.ones([2, 64]))[1].numpy().tolist())
except tf.errors.PermissionDeniedError as err:
    print("REFUSED", " ".join(err.message.split()))
"""


@pytest.fixture(scope="module")
def saved(add_bias_module, tmp_path_factory):
    path = tmp_path_factory.mktemp("trust") / "sm"
    module = tf.Module()
    module.f = tf.function(lambda x: add_bias_module(x, tf.zeros([64])),
                           input_signature=[tf.TensorSpec([None, 64])])  # fmt: skip
    tf.saved_model.save(module, str(path))
    return str(path)


@pytest.fixture(scope="module")
def add_bias_module():
    from conftest import make_add_bias

    return make_add_bias()


def run(saved, setup="", env=None):
    proc = run_python(CALL.format(path=saved, setup=setup), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def test_embedded_modules_run_by_default(saved):
    assert run(saved) == "RAN [64.0, 64.0]"


@pytest.mark.parametrize("how", ["env", "api"])
def test_refusing_embedded_modules_is_a_permission_error(saved, how):
    if how == "env":
        out = run(saved, env={"TFTVM_ALLOW_EMBEDDED_MODULES": "0"})
    else:
        out = run(saved, setup="tftvm.allow_embedded_modules(False)\nassert not tftvm.embedded_modules_allowed()")
    assert out.startswith("REFUSED"), out
    assert "TFTVM_ALLOW_EMBEDDED_MODULES=0" in out and "native code" in out


def test_refusal_still_runs_modules_this_process_built(saved):
    # Building the same op here registers its module by key: the graph's copy is not needed.
    setup = f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r}); from conftest import make_add_bias; make_add_bias()"
    assert run(saved, setup=setup, env={"TFTVM_ALLOW_EMBEDDED_MODULES": "off"}) == "RAN [64.0, 64.0]"


def test_policy_switch_checks_its_argument():
    with pytest.raises(TypeError, match="True or False"):
        tftvm.allow_embedded_modules("no")
    assert tftvm.embedded_modules_allowed()
