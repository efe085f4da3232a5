"""Topological order of graph nodes (or of groups of them)."""
from __future__ import annotations


def postorder(roots, parents) -> list:
    """Every node reachable from `roots` after all its parents (iterative: graphs are deep).
    Give `parents` in a fixed order: the order decides the Relax functions' text, and so the
    kernels' cache keys, in every process."""
    order, seen = [], set()
    for root in roots:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(parents(root)))]
        while stack:
            node, pending = stack[-1]
            for p in pending:
                if p not in seen:
                    seen.add(p)
                    stack.append((p, iter(parents(p))))
                    break
            else:
                stack.pop()
                order.append(node)
    return order
