"""The differential fuzzer (benchmarks/graph_fuzz.py), small: random graphs of the converter
table's ops, with None and 0-size dims and NaN, infinities, signed zeros, denormals and int
extremes among their values, through TF and tftvm's optimize, compile_model and enable();
every path must give TF's answer. A failure prints the graph, shrunk by hypothesis.
`python benchmarks/stress.py --part graphs --cases N` runs many."""
import logging
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import graph_fuzz  # noqa: E402


@pytest.fixture(autouse=True)
def quiet():
    logging.getLogger("tftvm").setLevel(logging.ERROR)  # converters refusing 0-size dims say why
    yield
    logging.getLogger("tftvm").setLevel(logging.NOTSET)


@pytest.mark.no_op_check
@seed(20261207)  # the same graphs in every checkout (derandomize hashes the file's path too)
@settings(max_examples=120, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(graph_fuzz.cases())
def test_random_graphs_give_tfs_answers_on_every_path(case):
    recipe, feeds = case
    differences = graph_fuzz.differences(recipe, feeds)
    assert not differences, f"\n{recipe}\nfeeds: {[a.tolist() for a in feeds]}\n" + "\n".join(differences)


def test_the_comparison_tells_nans_infinities_and_ints_apart():
    f = np.float32
    assert graph_fuzz.close(np.array([1.0, np.nan, np.inf], f), np.array([1.00001, np.nan, np.inf], f), "float32")
    assert not graph_fuzz.close(np.array([0.0], f), np.array([np.nan], f), "float32")
    assert not graph_fuzz.close(np.array([np.inf], f), np.array([-np.inf], f), "float32")
    assert not graph_fuzz.close(np.array([1.0], f), np.array([1.01], f), "float32")
    assert not graph_fuzz.close(np.array([3], np.int32), np.array([4], np.int32), "int32")
    assert not graph_fuzz.close(np.array([1.0], f), np.array([1.0, 1.0], f), "float32")


@seed(20261208)
@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(graph_fuzz.cases())
def test_a_printed_graph_parses_back_into_the_same_recipe(case):
    recipe, feeds = case
    again = graph_fuzz.Recipe.parse(str(recipe))
    assert again == recipe, f"\n{recipe}\n{again}"
    for a, b in zip(again.feeds([f.tolist() for f in feeds]), feeds):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def test_replay_runs_the_listed_graphs_again(tmp_path):
    """`stress.py --replay` takes the JSON lines the graphs part keeps (or its printed output)
    and says which listed graphs still differ: selu(-0.0) is -0.0 in TF, and its reciprocal
    -inf (tftvm gave +inf before; found by the fuzzer)."""
    import json
    import subprocess

    listed = tmp_path / "found"
    graph = "v0 = input(float32, [3])\nv1 = selu(v0)\nv2 = reciprocal(v1)\nreturn v2"
    listed.write_text(json.dumps({"graph": graph, "feeds": [[-0.0, 0.0, -2.0]], "differences": ["..."]}) + "\n")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "stress.py"), "--replay", str(listed)],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "1 listed graphs replayed, 0 still differ from TF" in proc.stdout
    assert "now TF's answer on every path" in proc.stdout
