"""Print which part of ksearch imports which (package level), and any import cycles between modules.

    python scripts/deps.py            # the picture used in commit messages and docs/layout.md

A "part" is the first level below ``ksearch`` (``agent``, ``tools``, ``tasks``, ...; top-level modules are parts of
their own). Imports inside functions count too: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "ksearch"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, *, type_only: bool = False) -> set[str]:
    """Every ``ksearch...`` module a file imports (relative imports resolved); ``type_only``: imports for type hints
    (``if TYPE_CHECKING:``) too."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: set[str] = set()
    for_hints = {id(n) for block in ast.walk(tree) if _is_type_checking(block) for n in ast.walk(block)}
    for node in ast.walk(tree):
        if id(node) in for_hints and not type_only:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "ksearch")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] != "ksearch":
                continue
            found.add(mod)
            for alias in node.names:  # ``from ksearch.tools import integrity`` imports a module
                candidate = f"{mod}.{alias.name}"
                if (ROOT.parent / candidate.replace(".", "/")).with_suffix(".py").exists() or (
                    ROOT.parent / candidate.replace(".", "/") / "__init__.py"
                ).exists():
                    found.add(candidate)
    found.discard(me)
    return found


def _is_type_checking(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:`` blocks hold imports for type hints only: not a dependency at run time."""
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")
    )


def module_graph(*, type_only: bool = False) -> dict[str, set[str]]:
    return {module_name(p): imports_of(p, type_only=type_only) for p in sorted(ROOT.rglob("*.py"))}


def part(module: str) -> str:
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 else "ksearch"


def part_graph(graph: dict[str, set[str]]) -> dict[str, dict[str, int]]:
    edges: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for mod, targets in graph.items():
        for target in targets:
            if part(target) != part(mod):
                edges[part(mod)][part(target)] += 1
    return edges


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10_000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def main() -> int:
    graph = module_graph()
    edges = part_graph(graph)
    print("part -> parts it imports (number of importing modules)")
    for src in sorted(edges):
        print(f"  {src:10} -> " + ", ".join(f"{t} ({n})" for t, n in sorted(edges[src].items())))
    found = cycles(graph)
    print(f"module import cycles: {len(found)}")
    for comp in found:
        print("  " + " <-> ".join(comp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
