"""Round/cycle bookkeeping inside one cycle (one chosen action): which prompt to send, and when to stop.

A *cycle* runs rounds (attempts) for one action until it stagnates or the budget runs out (spec 1.7, 1.8). This
module holds only the decisions, as pure functions over an immutable :class:`CycleProgress`, so the loop that calls
the LLM and the evaluator stays thin and the rules are unit-testable.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class PromptKind(StrEnum):
    """The code-prompt template for one attempt. Unlike K-Search, every kind keeps the action text (R8)."""

    ACTION_ON_BASE = "action_on_base"
    """Attempt 1, the parent has code: implement only the chosen action on top of it."""
    ACTION_FROM_SPEC = "action_from_spec"
    """Attempt 1, no base code: write the kernel from the task spec, guided by the action."""
    DEBUG = "debug"
    """The last attempt failed: fix it, keeping the action's intent."""
    IMPROVE = "improve"
    """The last attempt passed: make it faster, still within the action's intent."""


class StopReason(StrEnum):
    """Why a cycle ended; :func:`cycle_should_stop` returns the plain string value (checkpoint-friendly)."""

    STAGNATION = "stagnation"
    NO_IMPROVEMENT_OVER_BASE = "no improvement over base"
    ATTEMPT_BUDGET = "attempt budget"


def choose_prompt(attempt: int, has_base_code: bool, last_passed: bool | None, passed_in_cycle: bool) -> PromptKind:
    """Pick the template for ``attempt`` (1-based).

    Later attempts edit the *last* attempt's code, so what that code needs decides: a failed last attempt is
    debugged even if an earlier one passed (K-Search keys on 'any pass in the cycle' and so asks to speed up broken
    code). ``passed_in_cycle`` is only the fallback when the last outcome is unknown (``None``, e.g. after resume).
    """
    if attempt < 1:
        raise ValueError(f"attempt is 1-based, got {attempt}")
    if attempt == 1:
        return PromptKind.ACTION_ON_BASE if has_base_code else PromptKind.ACTION_FROM_SPEC
    passed = passed_in_cycle if last_passed is None else last_passed
    return PromptKind.IMPROVE if passed else PromptKind.DEBUG


class CycleProgress(BaseModel):
    """Immutable state of the current cycle; :func:`record_round` returns an updated copy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    attempts: int = Field(default=0, ge=0)
    best_score: float | None = None
    best_candidate_id: str | None = None
    best_evaluation_id: str | None = None
    passed_any: bool = False
    no_improve_streak: int = Field(default=0, ge=0)
    no_improve_over_base_streak: int = Field(default=0, ge=0)
    last_passed: bool | None = None


def _improves(progress: CycleProgress, score: float | None) -> bool:
    """A passed round improves on the cycle best if it is the first pass, or strictly beats the best score.

    With no scores (correctness-only evaluation) only the first pass counts; a scored pass beats an unscored best.
    """
    if not progress.passed_any:
        return True
    if score is None:
        return False
    return progress.best_score is None or score > progress.best_score


def _over_base_streak(progress: CycleProgress, base_score: float | None) -> int:
    """Counter update once the cycle has a pass and a positive base; a missing cycle score cannot beat the base."""
    if not progress.passed_any or base_score is None or base_score <= 0:
        return progress.no_improve_over_base_streak
    best = progress.best_score
    if best is not None and best > base_score:
        return 0
    return progress.no_improve_over_base_streak + 1


def record_round(
    progress: CycleProgress,
    *,
    passed: bool,
    score: float | None,
    candidate_id: str,
    evaluation_id: str,
    base_score: float | None,
) -> CycleProgress:
    """Fold one evaluated round into the cycle state (spec 1.8).

    ``no_improve_streak``: +1 for a failed round or a pass that does not beat the cycle best, 0 on improvement.
    ``no_improve_over_base_streak``: once the cycle has a pass and ``base_score > 0``, +1 for each round in which the
    cycle best is still <= base, 0 when it is above.
    """
    update: dict[str, object] = {"attempts": progress.attempts + 1, "last_passed": passed}
    if passed and _improves(progress, score):
        update.update(
            best_score=score,
            best_candidate_id=candidate_id,
            best_evaluation_id=evaluation_id,
            passed_any=True,
            no_improve_streak=0,
        )
    else:
        update["no_improve_streak"] = progress.no_improve_streak + 1
    after = progress.model_copy(update=update)
    return after.model_copy(update={"no_improve_over_base_streak": _over_base_streak(after, base_score)})


def cycle_should_stop(progress: CycleProgress, *, window: int, attempt_budget: int) -> str | None:
    """Why the cycle must end now (a :class:`StopReason` value as a plain ``str``), or None to run another round.

    Stagnation is checked first: it is the more informative reason when several hold at once.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if progress.no_improve_streak >= window:
        return StopReason.STAGNATION.value
    if progress.no_improve_over_base_streak >= window:
        return StopReason.NO_IMPROVEMENT_OVER_BASE.value
    if progress.attempts >= attempt_budget:
        return StopReason.ATTEMPT_BUDGET.value
    return None
