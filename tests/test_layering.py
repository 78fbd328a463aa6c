"""The direction of dependencies between ksearch's parts, checked on the source (ARCHITECTURE.md's table).

One plain order, top to bottom; a part imports only the parts below it:

    cli -> flows -> graph -> nodes -> agent -> skills -> llm -> tools -> tasks -> store -> contracts

and the shared leaves (errors, logs, redaction, pyparse, settings, the prompt templates, the package root's
version), which import only each other, are importable by all. No per-module exceptions. A lazy import inside a
function still counts.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("ksearch_deps", REPO / "scripts" / "deps.py")
assert _spec is not None and _spec.loader is not None
deps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(deps)

LAYERS = ("cli", "flows", "graph", "nodes", "agent", "skills", "llm", "tools", "tasks", "store", "contracts")
"""Top to bottom."""
SHARED = frozenset({"errors", "logs", "redaction", "pyparse", "prompts", "settings", "ksearch"})


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


EVALUATOR = "ksearch.tools.evaluator"
ROOMS = ("parent", "worker", "checker", "profiler", "shared")
"""The evaluator's packages by the process their code runs in (and ``shared``: what more than one runs)."""
FORBIDDEN = {
    "worker": {"parent", "checker"},
    "checker": {"parent", "worker", "profiler"},
    "profiler": {"parent", "worker", "checker"},
    "shared": {"parent", "worker", "checker", "profiler"},
}
"""Rooms a room must not import. The package root re-exports the parent's API, so importing it is importing the
parent."""


def _room(module: str) -> str | None:
    if module == EVALUATOR:
        return "parent"
    if not module.startswith(f"{EVALUATOR}."):
        return None
    return module.split(".")[3]


def test_every_evaluator_module_lives_in_a_room() -> None:
    rooms = {_room(module) for module in deps.module_graph() if module.startswith(f"{EVALUATOR}.")}
    assert rooms <= set(ROOMS), rooms - set(ROOMS)


def _room_violations() -> list[str]:
    found = []
    for module, targets in deps.module_graph().items():
        room = _room(module) if module != EVALUATOR else None
        for target in targets:
            if room is not None and _room(target) in FORBIDDEN.get(room, set()):
                found.append(f"{module} -> {target}")
    return sorted(found)


def test_worker_and_checker_import_neither_the_parent_nor_each_other() -> None:
    """The trusted checker never imports the candidate's process code; the candidate's process never imports the
    parent's or the checker's; the shared part imports none of the rooms."""
    assert _room_violations() == []


def test_the_room_check_sees_a_forbidden_import(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = deps.module_graph()
    graph[f"{EVALUATOR}.checker.main"] = graph[f"{EVALUATOR}.checker.main"] | {f"{EVALUATOR}.worker.guard"}
    graph[f"{EVALUATOR}.shared.seeds"] = graph[f"{EVALUATOR}.shared.seeds"] | {EVALUATOR}
    monkeypatch.setattr(deps, "module_graph", lambda: graph)
    assert _room_violations() == [
        f"{EVALUATOR}.checker.main -> {EVALUATOR}.worker.guard",
        f"{EVALUATOR}.shared.seeds -> {EVALUATOR}",
    ]


def test_no_type_only_import_cycles_in_the_evaluator() -> None:
    """Imports for type hints count here too: the worker's helpers take the worker as a protocol."""
    graph = deps.module_graph(type_only=True)
    evaluator = {m: {t for t in ts if t.startswith(EVALUATOR)} for m, ts in graph.items() if m.startswith(EVALUATOR)}
    assert deps.cycles(evaluator) == []


@pytest.mark.parametrize("room", ["worker", "checker"])
def test_a_worker_or_checker_process_loads_no_parent_module_at_start(room: str) -> None:
    """The static check reads the rooms' own imports; the package's ``__init__`` is imported by every process whose
    modules live beneath it, so it exports the parent's API lazily (loaded eagerly, it cost each start ~0.4 CPU-s)."""
    import subprocess
    import sys

    probe = (
        f"import sys, {EVALUATOR}.{room}.main; "
        f"print(sorted(m for m in sys.modules if m.startswith('{EVALUATOR}.parent')))"
    )
    out = subprocess.run([sys.executable, "-P", "-c", probe], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


def test_the_evaluators_api_still_imports_by_name() -> None:
    import ksearch.tools.evaluator as evaluator

    assert evaluator.evaluate.__module__ == f"{EVALUATOR}.parent.evaluate"
    assert set(evaluator.__all__) <= set(dir(evaluator)) | set(evaluator._EXPORTS)
    with pytest.raises(AttributeError):
        evaluator.no_such_name  # noqa: B018
