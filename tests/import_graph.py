"""The library's import graph, read from the source (AST), for the house checks.

Every ``import`` and ``from ... import`` anywhere in a module counts, type-only
(``if TYPE_CHECKING:``) and lazy (inside a function) ones included: a loop or an upward
edge that only a type checker or a late call follows is still a loop or an upward edge
for whoever reads or moves the code. import-linter checks the layers (pyproject.toml);
it cannot see loops, which is what :func:`cycles` is for.

``python tests/import_graph.py`` prints the loops, the upward imports, the largest
modules and classes: the figures the house is measured by.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {
    "xrmq.schemas": ROOT / "schemas",
    "xrmq.topics": ROOT / "topics",
    "xrmq.actors": ROOT / "actors",
}

# The three layers of actors/, by the first name under xrmq.actors. A higher rank may
# import a lower one; never the other way.
KERNEL = 0
CAPABILITY = 1
APP = 2
LAYERS: dict[str, int] = {
    "runtime": KERNEL,
    "clock": KERNEL,
    "logs": KERNEL,
    "_lazy": KERNEL,
    "explain": KERNEL,
    "models": CAPABILITY,
    "context": CAPABILITY,
    "routing": CAPABILITY,
    "conversation": CAPABILITY,
    "interaction": CAPABILITY,
    "voice": CAPABILITY,
    "tools": CAPABILITY,
    "realtime": CAPABILITY,
    "prompts": CAPABILITY,
    "publisher": CAPABILITY,
    "edge": APP,
    "eval": APP,
    "cli": APP,
    "arguments": APP,
}


def modules(packages: Mapping[str, Path] = PACKAGES) -> dict[str, Path]:
    """Every module of the library by its installed name (a package by its ``__init__``)."""
    found: dict[str, Path] = {}
    for package, folder in packages.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _resolve(name: str, known: Mapping[str, Path]) -> str | None:
    """The longest known module that ``name`` is or lies in (``a.b.attr`` -> ``a.b``)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def imports(module: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The library modules ``module`` imports, anywhere in its body."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                drop = node.level - 1 if is_package else node.level
                base = base[: len(base) - drop] if drop else base
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            targets = [f"{prefix}.{alias.name}" for alias in node.names] or [prefix]
        for target in targets:
            resolved = _resolve(target, known)
            if resolved is not None and resolved != module:
                found.add(resolved)
    return found


def graph(packages: Mapping[str, Path] = PACKAGES) -> dict[str, set[str]]:
    """Each module's imports of the library (of ``packages``)."""
    known = modules(packages)
    return {module: imports(module, path, known) for module, path in known.items()}


def cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
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
    return found


def layer(module: str) -> int | None:
    """The layer of an ``xrmq.actors`` module, None for the facade and the other packages."""
    parts = module.split(".")
    if parts[:2] != ["xrmq", "actors"] or len(parts) < 3:
        return None
    if parts[2] not in LAYERS:
        raise KeyError(f"{module}: no layer; add {parts[2]!r} to LAYERS")
    return LAYERS[parts[2]]


def upward(edges: Mapping[str, Iterable[str]]) -> list[tuple[str, str]]:
    """Every import of a module from a higher layer than the importer's."""
    found = []
    for module, targets in sorted(edges.items()):
        here = layer(module)
        if here is None:
            continue
        for target in sorted(targets):
            there = layer(target)
            if there is not None and there > here:
                found.append((module, target))
    return found


def largest_modules(count: int = 5) -> list[tuple[int, str]]:
    sizes = [(len(path.read_text().splitlines()), name) for name, path in modules().items()]
    return sorted(sizes, reverse=True)[:count]


def largest_classes(count: int = 5) -> list[tuple[int, str]]:
    sizes = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                methods = sum(
                    isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) for item in node.body
                )
                sizes.append((methods, f"{name}.{node.name}"))
    return sorted(sizes, reverse=True)[:count]


def main() -> int:
    edges = graph()
    loops = cycles(edges)
    up = upward(edges)
    print(f"import loops: {len(loops)}")
    for loop in loops:
        print("  " + " <-> ".join(loop))
    print(f"upward imports: {len(up)}")
    for source, target in up:
        print(f"  {source} -> {target}")
    print("largest modules (lines):")
    for size, name in largest_modules():
        print(f"  {size:5d} {name}")
    print("largest classes (methods):")
    for size, name in largest_classes():
        print(f"  {size:5d} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
