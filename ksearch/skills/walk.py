"""KLineage's backward walk on our evaluator: take an expert kernel apart one validation-gated simplification at a
time; each accepted step, reversed, is one optimisation the expert contains, ready to be lifted into a skill.

The loop asks the ``skill_simplifier`` role for one removal, evaluates the simpler kernel and accepts it when it is
correct and, where kernels can be timed, not significantly faster than the kernel it came from (a removal that makes
the kernel faster means the "optimisation" did not pay here). Rejections are fed back per category and later become
risks. Budgets are KLineage's defaults: 16 proposals, 4 rejections.

Not done here (KLineage does them): the feature audit of both kernels by a second model, and the forward round-trip
(a separate model re-deriving the optimisation from the simpler kernel alone at >= 0.99 of its speed). The static
feature checks of the lifted skill (``draft_contract_errors``) are the only audit.

Evaluation and timing are injected (the flow wires the sandboxed evaluator and ``compare``), so the loop is tested
on the CPU with scripted replies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from ksearch.contracts.evaluation import Evaluation
from ksearch.errors import BudgetExceededError, ModelReplyError
from ksearch.llm.parsing import extract_code
from ksearch.prompts import clip, render

if TYPE_CHECKING:  # the client is passed in (WalkServices); the skills never construct one
    from ksearch.llm.client import LLMClient

SIMPLIFIER_ROLE = "skill_simplifier"
MAX_STEPS = 16
MAX_REJECTIONS = 4


class SimplifyReply(BaseModel):
    """The JSON head of a simplifier reply (the simpler module follows it in a fenced block)."""

    model_config = ConfigDict(extra="forbid")

    done: bool
    reason: str = ""
    category: str | None = None
    locus: str | None = None
    removed: str | None = None
    backward_edit: str = ""

    @model_validator(mode="after")
    def _a_removal_names_itself(self) -> SimplifyReply:
        if not self.done and not (self.category and self.locus and self.removed):
            raise ValueError("a removal (done: false) needs 'category', 'locus' and 'removed'")
        return self


class WalkStep(BaseModel):
    """One proposal of the walk and what the gate said."""

    model_config = ConfigDict(extra="forbid")

    index: int
    category: str
    locus: str
    removed: str
    backward_edit: str = ""
    before_candidate_id: str
    """The kernel the optimisation was removed from (the more optimised side)."""
    after_candidate_id: str | None = None
    """The simpler kernel (None when the reply had no code)."""
    verdict: str
    accepted: bool
    reason: str
    speedup: float | None = None
    """Paired: simpler latency / before latency (above 1: the removed optimisation made the kernel faster)."""
    ci_low: float | None = None
    ci_high: float | None = None
    comparison: dict[str, Any] | None = None


Termination = Literal["complete", "step_limit", "rejection_limit", "budget", "unusable_reply"]


class WalkResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    termination: Termination
    reason: str
    steps: list[WalkStep]
    final_candidate_id: str
    """The simplest accepted kernel: the naive end of the lineage."""

    @property
    def accepted(self) -> list[WalkStep]:
        return [s for s in self.steps if s.accepted]


@dataclass
class WalkServices:
    """What the walk needs from outside: a model client, an evaluator and (on a GPU) a paired comparison."""

    llm: LLMClient
    evaluate: Callable[[str], tuple[str, Evaluation]]
    """code -> (candidate id, evaluation), cached by the caller."""
    compare: Callable[[str, str], dict[str, Any] | None]
    """(incumbent id, challenger id) -> the paired comparison record, or None where nothing is timed."""
    task_spec: str
    language: str
    device_description: str


def judge_simplification(evaluation: Evaluation, comparison: dict[str, Any] | None) -> tuple[bool, str]:
    """The gate. ``comparison`` has the simpler kernel as incumbent and the kernel before the removal as challenger,
    so its speedup is simpler / before latency (above 1: what was removed mattered)."""
    if not evaluation.passed:
        return False, f"the simpler kernel does not pass: {evaluation.summary()}"
    if comparison is None:
        return True, "correct; not timed (CPU interpreter), so the removed optimisation's effect is not measured"
    ratio = f"x{comparison['speedup']:.4f} [{comparison['ci_low']:.4f}, {comparison['ci_high']:.4f}]"
    if float(comparison["ci_high"]) < 1.0:
        return False, f"removing it made the kernel significantly faster ({ratio}): it did not pay here"
    if comparison.get("improved"):
        return True, f"correct, and the removed optimisation mattered: the kernel with it is faster by {ratio}"
    return True, f"correct; the removed optimisation's effect is within the noise ({ratio})"


def simplify_prompt(
    services: WalkServices,
    code: str,
    step: int,
    max_steps: int,
    accepted: list[WalkStep],
    rejected: dict[str, list[str]],
) -> str:
    removed = "\n".join(f"- {s.category} at {s.locus}: {s.removed}" for s in accepted) or "(none yet)"
    rejections = "\n".join(
        f"- {cat}: " + " | ".join(clip(r, 300) for r in reasons) for cat, reasons in rejected.items()
    )
    return render(
        "skill_simplify",
        task_spec=services.task_spec,
        language=services.language,
        device_description=services.device_description,
        current_code=code,
        step=step,
        max_steps=max_steps,
        removed=removed,
        rejected=rejections or "(none)",
    )


def backward_walk(
    services: WalkServices,
    expert_code: str,
    expert_id: str,
    *,
    max_steps: int = MAX_STEPS,
    max_rejections: int = MAX_REJECTIONS,
    on_step: Callable[[WalkStep], None] | None = None,
) -> WalkResult:
    """Walk from the (already gate-passed) expert towards the plainest correct kernel. Call keys are
    ``simplify:<k>``, so a walk re-run with the same recorder replays its paid calls and its cached evaluations."""
    current_code, current_id = expert_code, expert_id
    steps: list[WalkStep] = []
    rejected: dict[str, list[str]] = {}
    rejections = 0
    for k in range(1, max_steps + 1):
        prompt = simplify_prompt(services, current_code, k, max_steps, [s for s in steps if s.accepted], rejected)
        try:
            head, calls = services.llm.complete_json(SIMPLIFIER_ROLE, f"simplify:{k}", prompt, model_cls=SimplifyReply)
        except BudgetExceededError as exc:
            return WalkResult(termination="budget", reason=str(exc), steps=steps, final_candidate_id=current_id)
        except ModelReplyError as exc:
            return WalkResult(termination="unusable_reply", reason=str(exc), steps=steps, final_candidate_id=current_id)
        if head.done:
            return WalkResult(
                termination="complete",
                reason=head.reason or "the simplifier found nothing left to remove",
                steps=steps,
                final_candidate_id=current_id,
            )
        step = _try_step(services, k, head, calls[-1].reply, current_id)
        steps.append(step)
        if on_step is not None:
            on_step(step)
        if step.accepted:
            assert step.after_candidate_id is not None
            current_id = step.after_candidate_id
            current_code = _code_of(calls[-1].reply, services.language)
            continue
        rejected.setdefault(step.category, []).append(step.reason)
        rejections += 1
        if rejections >= max_rejections:
            return WalkResult(
                termination="rejection_limit",
                reason=f"{rejections} proposals rejected",
                steps=steps,
                final_candidate_id=current_id,
            )
    return WalkResult(
        termination="step_limit",
        reason=f"{max_steps} proposals made; the limit does not establish that the kernel is the plainest one",
        steps=steps,
        final_candidate_id=current_id,
    )


def _code_of(reply: str, language: str) -> str:
    return extract_code(reply, language)


def _try_step(services: WalkServices, k: int, head: SimplifyReply, reply: str, current_id: str) -> WalkStep:
    assert head.category and head.locus and head.removed
    base = {
        "index": k,
        "category": head.category,
        "locus": head.locus,
        "removed": head.removed,
        "backward_edit": head.backward_edit,
        "before_candidate_id": current_id,
    }
    try:
        code = _code_of(reply, services.language)
    except ModelReplyError as exc:
        return WalkStep(**base, verdict="no_code", accepted=False, reason=f"the reply had no usable code: {exc}")
    candidate_id, evaluation = services.evaluate(code)
    if candidate_id == current_id:
        return WalkStep(
            **base,
            after_candidate_id=candidate_id,
            verdict=evaluation.verdict.value,
            accepted=False,
            reason="the 'simpler' kernel is the same code",
        )
    comparison = services.compare(candidate_id, current_id) if evaluation.passed and evaluation.timed else None
    accepted, reason = judge_simplification(evaluation, comparison)
    paired = {k: float(comparison[k]) for k in ("speedup", "ci_low", "ci_high")} if comparison else {}
    return WalkStep(
        **base,
        after_candidate_id=candidate_id,
        verdict=evaluation.verdict.value,
        accepted=accepted,
        reason=reason,
        comparison=comparison,
        **paired,
    )
