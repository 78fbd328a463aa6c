"""When a passing candidate becomes the run's best. The decision is pure; measuring is injected, and a paired
comparison once measured is stored (``paired_comparison``, shared by prune, skill learning and the skills flow).

Rule: any passing candidate beats no incumbent; an untimed pass (CPU interpreter) never displaces anything; a timed
pass displaces an untimed incumbent. Between two timed candidates a single measurement each is not enough (the noise
between two evaluations is often larger than the gain): when the challenger's own score looks better, the two are
re-measured together, paired and interleaved on one GPU (``ksearch.tools.evaluator.parent.compare``), and the challenger
is promoted only when that comparison says ``improved`` (its whole confidence interval is above 1). Without a way to
compare (no ``compare`` available) the single-measurement rule applies, and the decision says so.

Before any timed candidate becomes the best it is confirmed in leaderboard mode (``confirm``: every repeat on fresh
inputs, every output checked, each repeat's samples held against the evaluator's clock): a candidate that fails that
confirmation, or whose confirmed time is clearly slower than the incumbent's, is not promoted
(``confirmation_decision``), whatever its own score or the paired comparison say.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from ksearch.store import Store, ensure_comparison, find_comparison


class ComparisonLike(Protocol):
    """What promotion reads from ``ksearch.tools.evaluator.Comparison``."""

    speedup: float
    ci_low: float
    ci_high: float
    improved: bool


class Decision(BaseModel):
    """Whether the challenger becomes the best, and why (for the log, the prune event and the store)."""

    model_config = ConfigDict(extra="forbid")

    promote: bool
    reason: str
    needs_comparison: bool = False
    """True when the decision waits for a paired comparison (call ``decide`` again with it)."""
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    confirmed_latency_ms: float | None = None
    """The challenger's latency in leaderboard mode (``confirm``), when it was confirmed."""


def promotion_line(decision: Decision) -> str:
    """The decision as the planner reads it: whether the cycle's best became the run's best, the rule's reason (the
    paired comparison's speedup and interval when one was measured) and the leaderboard-mode time when confirmed.
    Without it the planner sees a cycle's single measurement but not the re-measurement that decided."""
    verdict = "promoted, the run's new best" if decision.promote else "not promoted"
    line = f"{verdict} ({decision.reason})"
    if decision.confirmed_latency_ms is not None:
        line += f"; leaderboard-mode confirmation {decision.confirmed_latency_ms:.4f} ms"
    return line


CONFIRM_TOLERANCE = 1.10
"""A challenger whose confirmed time is more than this times the incumbent's confirmed time is not promoted: the two
leaderboard-mode times are separate evaluations (a few percent apart for the same kernel), so only a clear gap
counts, and the paired comparison decides the rest."""


def confirmation_decision(
    *, passed: bool, summary: str, challenger_ms: float | None, incumbent_ms: float | None
) -> Decision | None:
    """A refusal when the challenger's leaderboard-mode confirmation failed or is clearly slower than the
    incumbent's; None when promotion may go on (to the paired comparison, if one is needed)."""
    if not passed:
        return Decision(promote=False, reason=f"not confirmed in leaderboard mode: {summary}")
    if challenger_ms is not None and incumbent_ms is not None and challenger_ms > incumbent_ms * CONFIRM_TOLERANCE:
        return Decision(
            promote=False,
            confirmed_latency_ms=challenger_ms,
            reason=f"confirmed in leaderboard mode at {challenger_ms:.4g} ms, slower than the incumbent's "
            f"{incumbent_ms:.4g} ms",
        )
    return None


def decide(
    *,
    has_incumbent: bool,
    incumbent_score: float | None,
    challenger_score: float | None,
    comparison: ComparisonLike | dict[str, Any] | None = None,
    can_compare: bool = True,
) -> Decision:
    """The promotion rule. Call without ``comparison`` first; when ``needs_comparison`` comes back, measure and call
    again with it. ``can_compare=False`` (no compare function) falls back to comparing the two scores."""
    if not has_incumbent:
        return Decision(promote=True, reason="first passing candidate")
    if challenger_score is None:
        return Decision(promote=False, reason="untimed pass never displaces the incumbent")
    if incumbent_score is None:
        return Decision(promote=True, reason="first timed pass displaces an untimed incumbent")
    if challenger_score <= incumbent_score:
        return Decision(
            promote=False,
            reason=f"single measurement not better ({challenger_score:.6g} <= {incumbent_score:.6g})",
        )
    if comparison is None:
        if not can_compare:
            return Decision(
                promote=True,
                reason=f"single measurement better ({challenger_score:.6g} > {incumbent_score:.6g}); no paired "
                "comparison available",
            )
        return Decision(
            promote=False, needs_comparison=True, reason="single measurement better; needs a paired comparison"
        )
    fields = _fields(comparison)
    ci = f"speedup {fields['speedup']:.4f}x, 95% CI [{fields['ci_low']:.4f}, {fields['ci_high']:.4f}]"
    if fields["improved"]:
        return Decision(promote=True, reason=f"paired comparison: {ci}", **_numbers(fields))
    return Decision(promote=False, reason=f"paired comparison not significant: {ci}", **_numbers(fields))


def _fields(comparison: ComparisonLike | dict[str, Any]) -> dict[str, Any]:
    if isinstance(comparison, dict):
        return comparison
    return {k: getattr(comparison, k) for k in ("speedup", "ci_low", "ci_high", "improved")}


def _numbers(fields: dict[str, Any]) -> dict[str, float]:
    return {k: float(fields[k]) for k in ("speedup", "ci_low", "ci_high")}


def comparison_record(comparison: Any) -> dict[str, Any]:
    """A JSON-able dict of a comparison (a pydantic ``Comparison``, a dataclass-like object or a dict)."""
    if isinstance(comparison, dict):
        return comparison
    if hasattr(comparison, "model_dump"):
        return comparison.model_dump(mode="json")
    record = _fields(comparison)
    per_config = getattr(comparison, "per_config", None)
    if per_config is not None:
        record["per_config"] = [p.model_dump(mode="json") if hasattr(p, "model_dump") else p for p in per_config]
    return record


Measure = Callable[[str, str], Any]
"""(incumbent id, challenger id) -> a comparison (``Comparison``, or anything ``comparison_record`` takes), or None
when nothing can be timed."""


def paired_comparison(
    store: Store, incumbent_id: str, challenger_id: str, eval_key: str, measure: Measure
) -> dict[str, Any] | None:
    """The paired comparison of two stored candidates under ``eval_key``, measured at most once: the stored record
    when there is one; else ``measure(incumbent_id, challenger_id)`` as a record, stored under (incumbent, challenger,
    key) so a re-run after a crash decides alike. None (and nothing stored) when ``measure`` returns None. Its
    exceptions propagate: what a failed measurement means is each caller's call (prune keeps the incumbent, skill
    learning loses a number, the skills flow stops)."""
    record = find_comparison(store, incumbent_id, challenger_id, eval_key)
    if record is not None:
        return record
    measured = measure(incumbent_id, challenger_id)
    if measured is None:
        return None
    record = comparison_record(measured)
    ensure_comparison(store, incumbent_id, challenger_id, eval_key, record)
    return record


def is_improvement(incumbent_score: float | None, has_incumbent: bool, challenger_score: float | None) -> bool:
    """The single-measurement rule (kept for callers without a comparison): higher score wins."""
    return decide(
        has_incumbent=has_incumbent,
        incumbent_score=incumbent_score,
        challenger_score=challenger_score,
        can_compare=False,
    ).promote
