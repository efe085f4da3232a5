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
