"""What the planner reads about the cycles that just ended: every attempt with its measurements, profile and
resources, and its code as a diff against the code it edited; the codes the cycles started from, each once and whole.

Every attempt, not only each cycle's best (issue 57: a slower second attempt could be placed by its per-shape times
alone); no code is clipped (the head-and-tail clip of the best's code cut the kernel under study out of two prompts
of examples/trimul-record). Reads the store; writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ksearch.agent.code_view import change_view, fenced
from ksearch.agent.evidence_text import Score, aggregate_change, evidence_text
from ksearch.agent.state import CycleResult
from ksearch.agent.world_model import WorldModel
from ksearch.contracts.evaluation import Evaluation
from ksearch.prompts import clip
from ksearch.store import Store

LOG_CHARS = 1500
"""A failed attempt's log is quoted up to this many characters (logs, never code, are clipped)."""


@dataclass
class CodeShelf:
    """The codes the cycles started from, labelled ``code A``, ``code B``... and shown whole once, at the end."""

    entries: list[tuple[str, str, str]] = field(default_factory=list)
    """(label, candidate id, what it is)."""

    def label(self, candidate_id: str, what: str) -> str:
        for label, known, _ in self.entries:
            if known == candidate_id:
                return label
        label = f"code {chr(ord('A') + len(self.entries))}" if len(self.entries) < 26 else f"code {len(self.entries)}"
        self.entries.append((label, candidate_id, what))
        return label

    def what(self, label: str) -> str:
        return next(what for known, _, what in self.entries if known == label)

    def section(self, store: Store) -> str:
        if not self.entries:
            return ""
        blocks = ["## Codes the cycles started from (whole; the attempts above are diffs against them)"]
        for label, candidate_id, what in self.entries:
            blocks.append(f"### {label}: {what}\n{fenced(store.get_candidate(candidate_id).code)}")
        return "\n\n".join(blocks)


def _evaluation(store: Store, evaluation_id: str | None) -> Evaluation | None:
    if not evaluation_id:
        return None
    try:
        return store.get_evaluation(evaluation_id)
    except KeyError:
        return None


def parent_evaluation(wm: WorldModel, result: CycleResult, store: Store) -> Evaluation | None:
    """The evaluation of the code the cycle started from (its parent's solution), if it has one."""
    node = wm.nodes.get(result.node_id)
    parent = wm.nodes.get(node.parent_id) if node is not None and node.parent_id else None
    solution = parent.solution if parent is not None else None
    return _evaluation(store, solution.evaluation_id) if solution is not None else None


def _attempt_rows(result: CycleResult, store: Store, run_id: str | None) -> list[dict[str, Any]]:
    """The cycle's recorded rounds, or (without a run's records) its best and last attempt as the result names them."""
    if run_id is not None:
        rows = [a for a in store.list_attempts(run_id) if a.get("cycle_id") == result.cycle_id]
        if rows:
            return rows
    rows = []
    if result.best_candidate_id:
        rows.append({"attempt": None, "candidate_id": result.best_candidate_id})
        rows[-1]["evaluation_id"] = result.best_evaluation_id
    if result.last_candidate_id and result.last_candidate_id != result.best_candidate_id:
        rows.append({"attempt": None, "candidate_id": result.last_candidate_id})
        rows[-1]["evaluation_id"] = result.last_evaluation_id
    if not rows and result.last_error:
        rows.append({"attempt": None, "candidate_id": None, "error": result.last_error})
    return rows


def _attempt_name(row: dict[str, Any], cycle_id: str) -> str:
    return f"attempt {row['attempt']} of {cycle_id}" if row.get("attempt") else f"an attempt of {cycle_id}"


def _attempt_heading(row: dict[str, Any], ev: Evaluation | None, parent: Evaluation | None, best: bool) -> str:
    where = f" (round {row['round_index']}, {row['prompt_kind']})" if row.get("attempt") else ""
    name = f"Attempt {row['attempt']}" if row.get("attempt") else "Attempt"
    if ev is None:
        return f"### {name}{where}: no evaluation ({clip(str(row.get('error') or row.get('verdict') or ''), 300)})"
    change = aggregate_change(ev, parent) if parent is not None else None  # None unless both were timed
    versus = f", {change.describe('the parent')}" if change is not None else ""
    return f"### {name}{where}: {ev.summary()}{versus}{' (the best of the cycle)' if best else ''}"


def _attempt_block(
    row: dict[str, Any],
    ev: Evaluation | None,
    parent: Evaluation | None,
    before: tuple[str | None, str],
    *,
    best: bool,
    score: Score | None,
    store: Store,
    cycle_id: str,
) -> tuple[list[str], str | None]:
    """The lines of one attempt and its code (None when it wrote none)."""
    lines = [_attempt_heading(row, ev, parent, best)]
    if ev is not None:
        evidence = evidence_text(ev, parent, "parent", score=score)
        if evidence:
            lines.append(evidence)
        if ev.rejection is not None:
            lines.append(f"Rejected by rule {ev.rejection.rule}: {clip(ev.rejection.evidence, LOG_CHARS)}")
        if not ev.passed and ev.log.strip():
            lines.append("Log:\n" + clip(ev.log, LOG_CHARS))
    code = store.get_candidate(row["candidate_id"]).code if row.get("candidate_id") else None
    if code is not None:
        lines.append(change_view(before[0], code, before[1], _attempt_name(row, cycle_id)))
    return lines, code


def cycle_block(
    result: CycleResult,
    wm: WorldModel,
    store: Store,
    shelf: CodeShelf,
    *,
    run_id: str | None = None,
    score: Score | None = None,
    skill_line: Callable[[str, str], str] | None = None,
) -> str:
    """One ended cycle: the action, the prediction, the outcome, then every attempt in order."""
    node = wm.nodes.get(result.node_id)
    action = node.action if node is not None else None
    lines = [f"## Cycle {result.cycle_id} on node {result.node_id}: {action.title if action else result.node_id}"]
    parent = parent_evaluation(wm, result, store)
    base_code: str | None = None
    before_label = "the task spec (no code)"
    if result.base_candidate_id:
        parent_id = node.parent_id if node is not None else None
        perf = f", {parent.latency_ms:.4f} ms" if parent is not None and parent.latency_ms else ""
        before_label = shelf.label(result.base_candidate_id, f"the solution of node {parent_id}{perf}")
        base_code = store.get_candidate(result.base_candidate_id).code
    where = f" ({shelf.what(before_label)}; whole at the end)" if result.base_candidate_id else ""
    lines.append(f"Started from: {before_label}{where}. Rounds: {result.rounds}; ended by: {result.stop_reason}")
    if action is not None and action.expected_speedup:
        lines.append(f"Predicted speedup over the parent: {action.expected_speedup}x")
    if skill_line is not None and action is not None and action.skill_id:
        lines.append(skill_line(action.skill_id, result.cycle_id))
    if result.passed and result.best_evaluation_id:
        best = _evaluation(store, result.best_evaluation_id)
        lines.append(f"Outcome: PASSED. Best of the cycle: {best.summary() if best else result.best_candidate_id}")
        if result.promotion:
            lines.append(f"Promotion: {result.promotion}")
    else:
        lines.append("Outcome: NOTHING PASSED. The node is now marked failed.")
    before: tuple[str | None, str] = (base_code, before_label)
    for row in _attempt_rows(result, store, run_id):
        ev = _evaluation(store, row.get("evaluation_id"))
        is_best = bool(result.passed) and row.get("candidate_id") == result.best_candidate_id
        block, code = _attempt_block(
            row, ev, parent, before, best=is_best, score=score, store=store, cycle_id=result.cycle_id
        )
        lines.extend(block)
        if code is not None:
            before = (code, _attempt_name(row, result.cycle_id))
    return "\n".join(lines)


def evidence_view(
    results: list[CycleResult],
    wm: WorldModel,
    store: Store,
    *,
    run_id: str | None = None,
    score: Score | None = None,
    skill_line: Callable[[str, str], str] | None = None,
) -> str:
    """One block per ended cycle, then the codes they started from, whole."""
    shelf = CodeShelf()
    blocks = [cycle_block(r, wm, store, shelf, run_id=run_id, score=score, skill_line=skill_line) for r in results]
    codes = shelf.section(store)
    return "\n\n".join([*blocks, codes] if codes else blocks)
