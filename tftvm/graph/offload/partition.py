"""Cycle-safe clustering of the supported nodes of a dataflow graph.

Supported nodes are merged along data edges with union-find. Two clusters may
merge only if no path leads from one to the other through a node outside both:
contracting them would otherwise create a cycle (A -> x -> B and B -> A). The
check runs on the graph of clusters, which stays a DAG after every merge. Its search only
enters clusters whose first node comes before B's last one in the nodes' topological order:
a path to B leaves every cluster on it from a node before B's last node. Clustering merges
nodes in that order, so the search stays among the nodes seen so far, not everything
downstream (a 12-layer decoder's step: 1 s of a 10 s first call, before).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Callable, Hashable, Iterable, Sequence

Node = Hashable


class Clusters:
    """Union-find over the nodes, with the graph of clusters (root -> successor and
    predecessor roots) kept up to date as clusters merge."""

    def __init__(self, nodes: Sequence[Node], edges: Iterable[tuple[Node, Node]]):
        self.parent = {n: n for n in nodes}
        # cluster root -> the topological positions of its first and last node
        self.first = {n: i for i, n in enumerate(nodes)}
        self.last = dict(self.first)
        self.succ: dict[Node, set] = defaultdict(set)  # cluster root -> successor roots
        self.pred: dict[Node, set] = defaultdict(set)
        for a, b in edges:
            self.succ[a].add(b)
            self.pred[b].add(a)

    def find(self, n: Node) -> Node:
        while self.parent[n] != n:
            self.parent[n] = self.parent[self.parent[n]]
            n = self.parent[n]
        return n

    def path_avoiding_direct_edge(self, a: Node, b: Node) -> bool:
        """Is b reachable from a through at least one other cluster?"""
        end = self.last[b]
        stack = [s for s in self.succ[a] if s != b and self.first[s] < end]
        seen = set(stack)
        while stack:
            x = stack.pop()
            if x == b:
                return True
            for s in self.succ[x]:
                if s not in seen and (s == b or self.first[s] < end):
                    seen.add(s)
                    stack.append(s)
        return False

    def try_merge(self, a: Node, b: Node) -> bool:
        """Merge clusters a and b (roots) unless that would create a cycle."""
        if a == b:
            return True
        if self.path_avoiding_direct_edge(a, b) or self.path_avoiding_direct_edge(b, a):
            return False
        self.parent[b] = a
        self.first[a], self.last[a] = min(self.first[a], self.first[b]), max(self.last[a], self.last[b])
        for s in self.succ.pop(b, set()):
            self.pred[s].discard(b)
            if s != a:
                self.succ[a].add(s)
                self.pred[s].add(a)
        for p in self.pred.pop(b, set()):
            self.succ[p].discard(b)
            if p != a:
                self.pred[a].add(p)
                self.succ[p].add(a)
        self.succ[a].discard(a)
        self.pred[a].discard(a)
        return True


def cluster(nodes: Sequence[Node], edges: Iterable[tuple[Node, Node]],
            supported: Callable[[Node], bool], *, min_cluster_size: int = 3,
            max_clusters: int | None = None,
            counts: Callable[[Node], bool] = lambda n: True) -> list[list[Node]]:  # fmt: skip
    """Clusters of supported nodes, largest first, each at least `min_cluster_size`
    nodes for which `counts` is true (e.g. not Identity or Const).

    `nodes` must be in topological order of `edges`.
    """
    edges = list(edges)
    clusters = Clusters(nodes, edges)
    preds = defaultdict(list)
    for a, b in edges:
        preds[b].append(a)
    for n in nodes:
        if not supported(n):
            continue
        for p in preds[n]:
            if supported(p):
                clusters.try_merge(clusters.find(p), clusters.find(n))
    groups: dict[Node, list[Node]] = defaultdict(list)
    for n in nodes:
        if supported(n):
            groups[clusters.find(n)].append(n)
    result = [g for g in groups.values() if sum(1 for n in g if counts(n)) >= min_cluster_size]
    result.sort(key=lambda g: (-sum(1 for n in g if counts(n)), nodes.index(g[0])))
    return result[:max_clusters] if max_clusters is not None else result
