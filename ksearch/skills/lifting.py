"""Lifting a verified change into a skill: the ``skill_lifter`` role writes a draft, code checks its feature contract
against both versions of the code, and the skill is scoped to the context it was learned in.

Used by the search (``ksearch.agent.skill_use``: a significantly faster parent -> child edge) and by the ``skills
learn`` flow (the expert walk's accepted steps). LLM calls are keyed (``call_key``), so a lift re-run after a crash
replays its paid call.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ksearch.prompts import clip, render
from ksearch.skills.features import draft_contract_errors
from ksearch.skills.records import Scope, Skill, SkillContext, SkillDraft, SkillSource, make_skill

if TYPE_CHECKING:  # the client is passed in; the skills never construct one
    from ksearch.llm.client import LLMClient

LIFTER_ROLE = "skill_lifter"


@dataclass(frozen=True)
class LiftInput:
    """One verified change, forward direction (before = simpler, after = better), and what was measured."""

    origin: str
    """Where it comes from, in words (a search edge, or a step of an expert walk)."""
    context: SkillContext
    task_spec: str
    change: str
    """The action that made it, or the reversed removal of an expert walk."""
    before_code: str
    after_code: str
    measurement: str
    failures: list[str] = field(default_factory=list)


def lift_prompt(item: LiftInput) -> str:
    diff = "".join(
        difflib.unified_diff(
            item.before_code.splitlines(keepends=True), item.after_code.splitlines(keepends=True), "before", "after"
        )
    )
    return render(
        "skill_lift",
        origin=item.origin,
        family=item.context.family,
        language=item.context.language,
        arch=item.context.arch,
        task_spec=clip(item.task_spec, 4000),
        change=item.change,
        measurement=item.measurement,
        before_code=clip(item.before_code, 8000),
        after_code=clip(item.after_code, 8000),
        diff=clip(diff or "(no textual difference)", 6000),
        failures="\n".join(f"- {f}" for f in item.failures) or "(none)",
        schema=json.dumps(SkillDraft.model_json_schema(), separators=(",", ":")),
    )


def lift_skill(llm: LLMClient, call_key: str, item: LiftInput, *, source: SkillSource, max_repairs: int = 2) -> Skill:
    """Ask the lifter for a draft, check its feature contract against both versions of the code (a violated contract
    goes back to the model with the reasons), and scope it to ``item.context``. Raises ModelReplyError when no
    usable draft came back, BudgetExceededError when the budget is spent."""

    def contract(data: dict[str, Any]) -> list[str]:
        return draft_contract_errors(
            SkillDraft.model_validate(data), item.before_code, item.after_code, item.context.arch
        )

    draft, _calls = llm.complete_json(
        LIFTER_ROLE, call_key, lift_prompt(item), model_cls=SkillDraft, validate=contract, max_repairs=max_repairs
    )
    scope = Scope(families=[item.context.family], languages=[item.context.language], archs=[item.context.arch])
    return make_skill(draft, source=source, scope=scope)


def measurement_text(record: dict[str, Any] | None, *, what: str) -> str:
    """A paired comparison as one sentence for prompts and notes (or why there is none)."""
    if record is None:
        return f"{what}: not timed (CPU interpreter: correctness only); the effect is not measured."
    return (
        f"{what}: paired, interleaved re-measurement on {record.get('device') or 'the GPU'}: speedup "
        f"x{record['speedup']:.4f}, 95% CI [{record['ci_low']:.4f}, {record['ci_high']:.4f}] "
        f"over {record.get('rounds') or '?'} rounds"
    )
