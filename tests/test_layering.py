"""The direction of dependencies between ksearch's parts, checked on the source (ARCHITECTURE.md's table).

One plain order, top to bottom; a part imports only the parts below it:

    cli -> flows -> graph -> nodes -> agent -> skills -> llm -> tools -> tasks -> store -> contracts

and the shared leaves (errors, logs, redaction, pyparse, the prompt templates, the package root's version), which
import only each other, are importable by all. No per-module exceptions. A lazy import inside a function still counts.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("ksearch_deps", REPO / "scripts" / "deps.py")
assert _spec is not None and _spec.loader is not None
deps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(deps)

LAYERS = ("cli", "flows", "graph", "nodes", "agent", "skills", "llm", "tools", "tasks", "store", "contracts")
"""Top to bottom."""
SHARED = frozenset({"errors", "logs", "redaction", "pyparse", "prompts", "ksearch"})


def _may_import(src: str, dst: str) -> bool:
    if dst in SHARED:
        return True
    if src in SHARED:
        return False
    return src in LAYERS and dst in LAYERS and LAYERS.index(dst) > LAYERS.index(src)


def _violations() -> list[str]:
    graph = deps.module_graph()
    found = []
    for module, targets in graph.items():
        src = deps.part(module)
        for target in targets:
            dst = deps.part(target)
            if dst != src and not _may_import(src, dst):
                found.append(f"{module} -> {target}")
    return sorted(found)


def test_every_part_is_placed() -> None:
    parts = {deps.part(module) for module in deps.module_graph()}
    assert parts <= set(LAYERS) | SHARED, parts - set(LAYERS) - SHARED


def test_every_part_imports_only_the_parts_below_it() -> None:
    assert _violations() == []


def test_contracts_import_nothing_of_ours_but_themselves() -> None:
    graph = deps.module_graph()
    for module, targets in graph.items():
        if deps.part(module) == "contracts":
            assert {t for t in targets if deps.part(t) != "contracts"} == set(), module


def test_no_import_cycles_between_modules() -> None:
    assert deps.cycles(deps.module_graph()) == []


def test_the_checker_never_imports_the_worker_side() -> None:
    """The trusted checker must not import the candidate's process code (guard, worker, timing runner)."""
    graph = deps.module_graph()
    worker_side = {
        "ksearch.tools.evaluator.worker",
        "ksearch.tools.evaluator.guard",
        "ksearch.tools.evaluator.timing_runner",
    }
    assert graph["ksearch.tools.evaluator.checker"] & worker_side == set()
