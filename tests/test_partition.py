"""Clustering never creates a cycle, on hand-made and random DAGs."""
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st
from tftvm.graph.offload.partition import cluster


def contracted_is_acyclic(nodes, edges, clusters) -> bool:
    owner = {n: n for n in nodes}
    for i, c in enumerate(clusters):
        for n in c:
            owner[n] = ("cluster", i)
    succ, indeg = defaultdict(set), defaultdict(int)
    for a, b in edges:
        a, b = owner[a], owner[b]
        if a != b and b not in succ[a]:
            succ[a].add(b)
            indeg[b] += 1
    vertices = set(owner.values())
    ready = [v for v in vertices if indeg[v] == 0]
    visited = 0
    while ready:
        v = ready.pop()
        visited += 1
        for s in succ[v]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return visited == len(vertices)


def test_diamond_through_unsupported_node_is_not_merged():
    # a -> x(unsupported) -> c and a -> c: merging a and c would make a cycle with x.
    nodes = ["a", "x", "c"]
    edges = [("a", "x"), ("x", "c"), ("a", "c")]
    clusters = cluster(nodes, edges, lambda n: n != "x", min_cluster_size=1)
    assert sorted(map(sorted, clusters)) == [["a"], ["c"]]
    assert contracted_is_acyclic(nodes, edges, clusters)


def test_chain_is_one_cluster_and_min_size_counts_only_counted_nodes():
    nodes = ["const", "a", "b", "c"]
    edges = [("const", "a"), ("a", "b"), ("b", "c")]
    (only,) = cluster(nodes, edges, lambda n: True, min_cluster_size=3)
    assert sorted(only) == sorted(nodes)
    assert cluster(nodes, edges, lambda n: True, min_cluster_size=4, counts=lambda n: n != "const") == []


def test_max_clusters_keeps_the_largest():
    nodes = ["a1", "a2", "a3", "x", "b1", "b2"]
    edges = [("a1", "a2"), ("a2", "a3"), ("a3", "x"), ("x", "b1"), ("b1", "b2")]
    clusters = cluster(nodes, edges, lambda n: n != "x", min_cluster_size=1, max_clusters=1)
    assert clusters == [["a1", "a2", "a3"]]


@st.composite
def random_dag(draw):
    n = draw(st.integers(1, 25))
    edges = [(i, j) for j in range(n) for i in range(j) if draw(st.booleans()) and draw(st.booleans())]
    supported = {i for i in range(n) if draw(st.integers(0, 3)) > 0}
    return list(range(n)), edges, supported


@settings(max_examples=300, deadline=None)
@given(random_dag())
def test_property_random_dags_stay_acyclic(dag):
    nodes, edges, supported = dag
    clusters = cluster(nodes, edges, lambda n: n in supported, min_cluster_size=1)
    members = [n for c in clusters for n in c]
    assert len(members) == len(set(members))  # disjoint
    assert set(members) == supported  # min size 1: every supported node is somewhere
    assert contracted_is_acyclic(nodes, edges, clusters)


def full_search(self, a, b) -> bool:
    """Is b reachable from a through another cluster, searching everything downstream of a."""
    stack = [s for s in self.succ[a] if s != b]
    seen = set(stack)
    while stack:
        x = stack.pop()
        if x == b:
            return True
        for s in self.succ[x] - seen:
            seen.add(s)
            stack.append(s)
    return False


@settings(max_examples=300, deadline=None)
@given(random_dag())
def test_property_the_bounded_search_merges_what_a_full_search_merges(dag):
    import pytest

    from tftvm.graph.offload import partition

    nodes, edges, supported = dag
    bounded = cluster(nodes, edges, lambda n: n in supported, min_cluster_size=1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(partition.Clusters, "path_avoiding_direct_edge", full_search)
        full = cluster(nodes, edges, lambda n: n in supported, min_cluster_size=1)
    assert bounded == full


def test_topological_order_of_a_deep_chain_needs_no_recursion():
    from tftvm.graph.tfgraph.order import postorder

    depth = 20000  # far beyond Python's recursion limit
    parents = {i: [i - 1] if i else [] for i in range(depth)}
    order = postorder([depth - 1], lambda n: parents[n])
    assert order == list(range(depth))
