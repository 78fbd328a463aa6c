"""What a cycle's coder learns from the cycles running beside it: their finished attempts, each with its result
against its own base and the change it made. Parallel cycles otherwise repeat each other's losing changes (issue 57:
round 4 of examples/trimul-record repeated round 2's).

Every attempt of theirs that is recorded when the prompt is written is shown: the cycles run concurrently (each in its
own thread), so which ones have finished depends on timing, as it would for engineers working side by side. A prompt
is written once per call key (a resume or a replay reuses the recorded reply). Reads the store; writes nothing.
"""

from __future__ import annotations

import re
from typing import Any

from ksearch.agent.code_view import fenced, unified_diff
from ksearch.agent.evidence_text import aggregate_change
from ksearch.agent.state import CycleState, SiblingCycle
from ksearch.contracts.evaluation import Evaluation
from ksearch.prompts import clip
from ksearch.store import Store

JIT_DEF = re.compile(r"@triton\.jit[^\n]*\n(?:@[^\n]*\n)*def (\w+)")
"""The name of each ``@triton.jit`` function of a module (decorators in between allowed)."""
DIFF_CHARS = 4000
"""A sibling's change is quoted up to this many characters: it is another cycle's code, not the one under study."""


def _evaluation(store: Store, evaluation_id: str | None) -> Evaluation | None:
    if not evaluation_id:
        return None
    try:
        return store.get_evaluation(evaluation_id)
    except KeyError:
        return None


def _shapes(ev: Evaluation) -> str:
    return ", ".join(f"{t.config.split('_')[0]} {t.headline_ms:.4f}" for t in ev.timings)


def _attempt_lines(
    row: dict[str, Any], store: Store, before: str | None, base: Evaluation | None, sibling: SiblingCycle
) -> list[str]:
    ev = _evaluation(store, row.get("evaluation_id"))
    if ev is None:
        return [f"- attempt {row['attempt']}: no evaluation ({clip(str(row.get('error') or ''), 300)})"]
    change = aggregate_change(ev, base) if base is not None else None  # None unless both were timed
    versus = f", {change.describe('its base')}" if change is not None else ""
    lines = [f"- attempt {row['attempt']} ({row['prompt_kind']}): {ev.summary()}{versus}"]
    if ev.timings:
        lines.append(f"  per shape (ms): {_shapes(ev)}")
    code = store.get_candidate(row["candidate_id"]).code  # an evaluated attempt always has its code
    if before is None:
        kernels = ", ".join(JIT_DEF.findall(code)) or "none"
        lines.append(f"  written from the spec ({len(code.splitlines())} lines; Triton kernels: {kernels})")
        return lines
    diff = unified_diff(before, code, "the code it edited", f"attempt {row['attempt']} of {sibling.cycle_id}")
    lines.append("  its change:\n" + fenced(clip(diff, DIFF_CHARS), "diff") if diff else "  the same code it edited")
    return lines


def sibling_block(sibling: SiblingCycle, store: Store, run_id: str, eval_key: str) -> str:
    """One sibling cycle's finished attempts, or '' when none has finished."""
    rows = [a for a in store.list_attempts(run_id) if a.get("cycle_id") == sibling.cycle_id]
    if not rows:
        return ""
    base_code = store.get_candidate(sibling.base_candidate_id).code if sibling.base_candidate_id else None
    found = store.find_evaluation(sibling.base_candidate_id, eval_key) if sibling.base_candidate_id else None
    base = found[1] if found is not None else None
    lines = [f"Cycle {sibling.cycle_id} on node {sibling.node_id}: {sibling.title}"]
    before = base_code
    for row in sorted(rows, key=lambda a: int(a["attempt"])):
        lines.extend(_attempt_lines(row, store, before, base, sibling))
        if row.get("candidate_id"):
            before = store.get_candidate(row["candidate_id"]).code
    return "\n".join(lines)


def sibling_results(state: CycleState, ctx: Any) -> str:
    """The section of the coder's prompt on the cycles beside this one (``ctx``: the run's ``SearchContext``)."""
    if not state.siblings:
        return "(no other cycle runs beside this one)"
    blocks = [sibling_block(s, ctx.store, ctx.run_id, ctx.eval_key) for s in state.siblings]
    blocks = [b for b in blocks if b]
    if not blocks:
        return "(none of the cycles beside this one has finished an attempt yet)"
    return "\n\n".join(blocks)
