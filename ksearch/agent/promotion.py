"""When a passing candidate becomes the run's best. Pure.

This is the single-measurement rule; the hardened evaluator replaces it with a paired, interleaved re-measurement
against the incumbent (a candidate is promoted only when the improvement exceeds the measured noise).
"""

from __future__ import annotations


def is_improvement(incumbent_score: float | None, has_incumbent: bool, challenger_score: float | None) -> bool:
    """Higher score wins; any passing candidate beats no incumbent; an untimed pass never displaces a timed one."""
    if not has_incumbent:
        return True
    if challenger_score is None:
        return False
    if incumbent_score is None:
        return True
    return challenger_score > incumbent_score
