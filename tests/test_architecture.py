"""The package's structure rules, read from its source: imports point one way (no circles)
and no module uses another module's private (`_name`) names.

Every import counts, at module level or inside a function: a lazy import is still a
dependency, and a circle of lazy imports is still a design that cannot be read in one order.
"""
from __future__ import annotations

import ast
from pathlib import Path

import tftvm

ROOT = Path(tftvm.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    """Every module of the package; codegen's templates are text to fill in, not modules."""
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py")) if "templates" not in p.parts}


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _resolve(name: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = _package_of(name, path).split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(name: str, path: Path, modules: dict) -> list[tuple[str, str | None]]:
    """(module imported, name taken from it or None) for each import in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names if alias.name.startswith("tftvm")]
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(name, path, node)
            if not source.startswith("tftvm"):
                continue
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.append((submodule, None) if submodule in modules else (source, alias.name))
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {m for m, _ in _imports(name, path, modules) if m in modules and m != name}
            for name, path in modules.items()}  # fmt: skip


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]

    def visit(root):
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root), on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child), on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_import_graph_has_no_circles():
    assert _circles(_graph()) == []


def test_the_circle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _circles(graph) == [["a", "b", "c"]]


def _private_uses(name: str, path: Path, modules: dict) -> list[str]:
    uses = [f"{name} imports {source}.{taken}" for source, taken in _imports(name, path, modules)
            if taken and taken.startswith("_") and not taken.startswith("__")]  # fmt: skip
    tree = ast.parse(path.read_text(), str(path))
    aliases = {}  # local name -> tftvm module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (source := _resolve(name, path, node)).startswith("tftvm"):
            for alias in node.names:
                if f"{source}.{alias.name}" in modules:
                    aliases[alias.asname or alias.name] = f"{source}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("tftvm") and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and node.attr.startswith("_")
                and not node.attr.startswith("__")):  # fmt: skip
            uses.append(f"{name} uses {aliases[node.value.id]}.{node.attr}")
    return uses


def test_no_module_uses_another_modules_private_names():
    modules = _modules()
    assert [use for name, path in modules.items() for use in _private_uses(name, path, modules)] == []
