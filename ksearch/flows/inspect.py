"""Reading a workspace for ``runs``, ``show`` and ``tasks``: plain data the CLI formats and the MCP server returns.

Light on purpose: listing runs and showing one read the store only, so this module imports neither torch (the
tasks) nor LangGraph (the graph); ``tests/cli/test_cli_import.py`` checks it. A waiting run's pauses come from its
row (``runs.pending``, written when it paused); the tasks are loaded only when they are asked for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ksearch.agent.evidence_text import evidence_text
from ksearch.agent.world_model import WorldModel
from ksearch.contracts.evaluation import Evaluation
from ksearch.flows.driving import driver_alive
from ksearch.flows.run_cost import RunCost, run_cost
from ksearch.flows.workspace import open_store
from ksearch.llm.pauses import Waiting, answer_for
from ksearch.store import Store
from ksearch.store.steering import list_acts

if TYPE_CHECKING:
    from ksearch.tasks.registry import TaskInfo

__all__ = ["RunView", "canonical_task", "list_runs", "list_tasks", "resolve_run_id", "run_view"]


@dataclass
class RunView:
    """Everything ``show`` prints about one run."""

    run: dict[str, Any]
    world_model: WorldModel
    attempts: list[dict[str, Any]]
    usage: dict[str, dict[str, float]]
    best_code: str | None = None
    best_evaluation: Evaluation | None = None
    steering: list[dict[str, Any]] = field(default_factory=list)
    """The run's steering acts, oldest first (``ksearch steer``)."""
    pending: list[Waiting] = field(default_factory=list)
    """What the run waits for, when it is paused."""
    llm_calls: list[dict[str, Any]] = field(default_factory=list)
    """Every LLM call (key, role, model, tokens; without prompt and reply text)."""
    cost: RunCost | None = None
    """Tokens, dollars (when priced), GPU-minutes and wall minutes per round."""
    best_evidence: str = ""
    """The best kernel's per-shape timings with their roofline position, its profile and resources, as text."""
    extra: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "world_model": self.world_model.model_dump(mode="json"),
            "attempts": self.attempts,
            "usage": self.usage,
            "llm_calls": self.llm_calls,
            "steering": self.steering,
            "pending": [
                {"key": w.prompt.key, "kind": w.prompt.kind, "role": w.prompt.role, "answered": w.answered}
                for w in self.pending
            ],
            "best_evaluation": self.best_evaluation.model_dump(mode="json") if self.best_evaluation else None,
            "best_code": self.best_code,
            "cost": None
            if self.cost is None
            else {**self.cost.model_dump(), "wall_minutes_per_round": self.cost.wall_minutes_per_round},
        }


def list_runs(workspace: Path | None = None) -> list[dict[str, Any]]:
    """The workspace's runs, newest first, each with its LLM usage totals under ``usage``; a run whose status says
    ``running`` also says under ``driven`` whether a process is driving it now (False: it crashed or was killed)."""
    store = open_store(workspace, read_only=True)
    try:
        rows = store.list_runs()
        runs = [{**r, "usage": store.usage(r["id"])["total"]} for r in rows]
    finally:
        store.close()
    for r in runs:
        r.pop("pending", None)  # what a waiting run waits for: `show` and `pending` say it
        if r["status"] == "running":
            r["driven"] = bool(r.get("driver")) and driver_alive(r["driver"])
    return runs


def resolve_run_id(run_id: str | None, workspace: Path | None = None, *, unfinished: bool = False) -> str:
    """The full id of ``run_id`` (a unique prefix is enough), or, when it is None, of the latest run (``unfinished``:
    the latest one not finished). RunNotFoundError when there is no such run."""
    store = open_store(workspace, read_only=True)
    try:
        run = store.get_run(run_id) if run_id is not None else store.latest_run(unfinished=unfinished)
        return run["id"]
    finally:
        store.close()


def run_view(run_id: str, workspace: Path | None = None) -> RunView:
    """One run (a unique id prefix is enough): its row, latest world model, rounds, usage and best kernel."""
    store = open_store(workspace, read_only=True)
    try:
        run = store.get_run(run_id)
        paused = run.pop("pending", None)
        snapshots = store.list_snapshots(run["id"])
        best = store.get_evaluation(run["best_evaluation_id"]) if run["best_evaluation_id"] else None
        return RunView(
            run=run,
            world_model=WorldModel.model_validate_json(snapshots[-1]["world_model"]) if snapshots else WorldModel(),
            attempts=store.list_attempts(run["id"]),
            usage=store.usage(run["id"]),
            best_code=store.get_candidate(run["best_candidate_id"]).code if run["best_candidate_id"] else None,
            best_evaluation=best,
            cost=run_cost(store, run),
            best_evidence=evidence_text(best, detail=True) if best is not None else "",
            steering=list_acts(store, run["id"]),
            pending=pauses(store, run, paused) if run["status"] == "waiting" else [],
            llm_calls=[
                {k: v for k, v in c.items() if k not in ("prompt", "reply")} for c in store.list_llm_calls(run["id"])
            ],
        )
    finally:
        store.close()


def pauses(store: Store, run: dict[str, Any], stored: str | None) -> list[Waiting]:
    """A waiting run's pauses, each marked answered when the store holds its answer: from the run's row, or, for a
    run paused by a ksearch that did not record them there, from its checkpoint (which loads the graph)."""
    if stored is None:
        from ksearch.flows.interactive import read_pending

        return read_pending(store, run["id"])
    found = [Waiting.model_validate(w) for w in json.loads(stored)]
    for w in found:
        w.answered = answer_for(store, run["id"], w.prompt) is not None
    return found


def run_row(run_id: str, workspace: Path | None = None) -> dict[str, Any]:
    store = open_store(workspace, read_only=True)
    try:
        return store.get_run(run_id)
    finally:
        store.close()


def evaluation(evaluation_id: str, workspace: Path | None = None) -> Evaluation:
    store = open_store(workspace, read_only=True)
    try:
        return store.get_evaluation(evaluation_id)
    finally:
        store.close()


def canonical_task(task: str, kernelbench_root: Path | None, device: str) -> str:
    """The name a run carries (absolute paths for KernelBench problems and operator files), validated on ``device``."""
    from ksearch.tasks.registry import prepare_task

    return prepare_task(task, kernelbench_root=kernelbench_root, device=device).name


def list_tasks() -> list[TaskInfo]:
    """The tasks a run can search: built in, registered by installed packages, and the name patterns."""
    from ksearch.tasks.registry import list_tasks as registered

    return registered()
