"""The direction of dependencies between ksearch's parts, checked on the source (ARCHITECTURE.md's table).

cli -> flows -> graph -> nodes -> agent -> skills -> llm -> tools -> tasks, with the shared contracts (and errors) importable by all and
importing nothing of ours; the store beside the agent and tools. A lazy import inside a function still counts.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("ksearch_deps", REPO / "scripts" / "deps.py")
assert _spec is not None and _spec.loader is not None
deps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(deps)

ALLOWED: dict[str, set[str]] = {
    "ksearch": set(),
    "contracts": set(),
    "errors": set(),
    "logs": set(),
    "redaction": set(),
    "prompts": set(),
    "tasks": {"contracts", "errors"},
    "tools": {"contracts", "errors", "tasks", "ksearch", "redaction"},
    "store": {"contracts", "errors", "redaction"},
    "llm": {"contracts", "errors", "logs", "redaction", "prompts", "tools", "tasks", "store"},
    "skills": {"contracts", "errors", "redaction", "prompts", "tasks", "tools", "store", "llm"},
    "nodes": {"contracts", "errors", "tasks", "tools", "store", "agent", "prompts", "skills", "llm"},
    "agent": {"contracts", "errors", "tasks", "tools", "store", "redaction", "prompts", "skills", "llm"},
    "graph": {"contracts", "errors", "tasks", "tools", "store", "agent", "nodes", "redaction", "prompts", "skills", "llm"},
    "flows": {"contracts", "errors", "tasks", "tools", "store", "agent", "graph", "ksearch", "redaction", "skills", "llm"},
    "cli": {"contracts", "errors", "logs", "flows", "agent", "skills"},
}
CLI_AGENT_DATA = {"ksearch.agent.config", "ksearch.agent.world_model"}
"""The CLI builds a run's config from flags and draws the world-model tree; nothing else of the agent."""


def _violations() -> list[str]:
    graph = deps.module_graph()
    found = []
    for module, targets in graph.items():
        src = deps.part(module)
        for target in targets:
            dst = deps.part(target)
            if dst == src:
                continue
            if dst not in ALLOWED.get(src, set()):
                found.append(f"{module} -> {target}")
            elif src == "cli" and dst == "agent" and target not in CLI_AGENT_DATA:
                found.append(f"{module} -> {target} (the CLI may use the agent's data types only)")
    return sorted(found)


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
    worker_side = {"ksearch.tools.evaluator.worker", "ksearch.tools.evaluator.guard", "ksearch.tools.evaluator.timing_runner"}
    assert graph["ksearch.tools.evaluator.checker"] & worker_side == set()
