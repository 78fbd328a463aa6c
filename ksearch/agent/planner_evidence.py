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
    """The codes the cycles started from, labelled ``code 1``, ``code 2``... and shown whole once, at the end."""

    entries: dict[str, tuple[str, str]] = field(default_factory=dict)
    """candidate id -> (label, what it is), in the order they were met."""

    def label(self, candidate_id: str, what: str) -> str:
        label, _ = self.entries.setdefault(candidate_id, (f"code {len(self.entries) + 1}", what))
        return label

    def section(self, store: Store) -> str:
        blocks = ["## Codes the cycles started from (whole; the attempts above are diffs against them)"]
        for candidate_id, (label, what) in self.entries.items():
            blocks.append(f"### {label}: {what}\n{fenced(store.get_candidate(candidate_id).code)}")
        return "\n\n".join(blocks) if self.entries else ""


def _evaluation(store: Store, evaluation_id: str | None) -> Evaluation | None:
    return store.get_evaluation(evaluation_id) if evaluation_id else None


def parent_evaluation(wm: WorldModel, result: CycleResult, store: Store) -> Evaluation | None:
    """The evaluation of the code the cycle started from (its parent's solution), if it has one."""
    parent_id = wm.nodes[result.node_id].parent_id
    assert parent_id is not None  # a cycle's node is never the root
    parent = wm.nodes[parent_id]
    return _evaluation(store, parent.solution.evaluation_id) if parent.solution is not None else None


def _attempt_heading(row: dict[str, Any], ev: Evaluation | None, parent: Evaluation | None, best: bool) -> str:
    head = f"### Attempt {row['attempt']} (round {row['round_index']}, {row['prompt_kind']})"
    if ev is None:
        return f"{head}: no evaluation ({clip(str(row.get('error') or ''), 300)})"
    change = aggregate_change(ev, parent) if parent is not None else None  # None unless both were timed
    versus = f", {change.describe('the parent')}" if change is not None else ""
    return f"{head}: {ev.summary()}{versus}{' (the best of the cycle)' if best else ''}"


def _attempt_lines(
    row: dict[str, Any], ev: Evaluation | None, parent: Evaluation | None, best: bool, score: Score | None
) -> list[str]:
    """One attempt's heading and measurements (its code follows them)."""
    lines = [_attempt_heading(row, ev, parent, best)]
    if ev is None:
        return lines
    evidence = evidence_text(ev, parent, "parent", score=score)
    if evidence:
        lines.append(evidence)
    if ev.rejection is not None:
        lines.append(f"Rejected by rule {ev.rejection.rule}: {clip(ev.rejection.evidence, LOG_CHARS)}")
    if not ev.passed and ev.log.strip():
        lines.append("Log:\n" + clip(ev.log, LOG_CHARS))
    return lines


def cycle_block(
    result: CycleResult,
    wm: WorldModel,
    store: Store,
    shelf: CodeShelf,
    *,
    run_id: str,
    skill_line: Callable[[str, str], str],
    score: Score | None = None,
) -> str:
    """One ended cycle: the action, the prediction, the outcome, then every attempt in order."""
    node = wm.nodes[result.node_id]
    action = node.action
    assert action is not None  # a cycle runs an action
    lines = [f"## Cycle {result.cycle_id} on node {result.node_id}: {action.title}"]
    parent = parent_evaluation(wm, result, store)
    before: tuple[str | None, str] = (None, "the task spec (no code)")
    started = before[1]
    if result.base_candidate_id:
        perf = f", {parent.latency_ms:.4f} ms" if parent is not None and parent.latency_ms else ""
        what = f"the solution of node {node.parent_id}{perf}"
        before = (store.get_candidate(result.base_candidate_id).code, shelf.label(result.base_candidate_id, what))
        started = f"{before[1]} ({what}; whole at the end)"
    lines.append(f"Started from: {started}. Rounds: {result.rounds}; ended by: {result.stop_reason}")
    if action.expected_speedup:
        lines.append(f"Predicted speedup over the parent: {action.expected_speedup}x")
    if action.skill_id:
        lines.append(skill_line(action.skill_id, result.cycle_id))
    best = _evaluation(store, result.best_evaluation_id) if result.passed else None
    if best is not None:
        lines.append(f"Outcome: PASSED. Best of the cycle: {best.summary()}")
        if result.promotion:
            lines.append(f"Promotion: {result.promotion}")
    else:
        lines.append("Outcome: NOTHING PASSED. The node is now marked failed.")
    for row in [a for a in store.list_attempts(run_id) if a.get("cycle_id") == result.cycle_id]:
        ev = _evaluation(store, row.get("evaluation_id"))
        is_best = row.get("candidate_id") == result.best_candidate_id  # None for a failed cycle: no evaluated row
        lines.extend(_attempt_lines(row, ev, parent, is_best, score))
        if row.get("candidate_id"):
            code = store.get_candidate(row["candidate_id"]).code
            name = f"attempt {row['attempt']} of {result.cycle_id}"
            lines.append(change_view(before[0], code, before[1], name))
            before = (code, name)
    return "\n".join(lines)


def evidence_view(
    results: list[CycleResult],
    wm: WorldModel,
    store: Store,
    *,
    run_id: str,
    skill_line: Callable[[str, str], str],
    score: Score | None = None,
) -> str:
    """One block per ended cycle, then the codes they started from, whole."""
    shelf = CodeShelf()
    blocks = [cycle_block(r, wm, store, shelf, run_id=run_id, score=score, skill_line=skill_line) for r in results]
    codes = shelf.section(store)
    return "\n\n".join([*blocks, codes] if codes else blocks)
