"""The pure promotion rule (``ksearch.agent.promotion``) at its edges: a tie, the confirmation tolerance measured
against the incumbent's own time, a confirmation without a time, and how a comparison is recorded."""

from __future__ import annotations

from types import SimpleNamespace

from pydantic import BaseModel

from ksearch.agent.promotion import CONFIRM_TOLERANCE, comparison_record, confirmation_decision, decide, is_improvement


def test_a_tie_is_not_an_improvement_and_is_not_worth_a_comparison() -> None:
    tie = decide(has_incumbent=True, incumbent_score=2.0, challenger_score=2.0)
    assert not tie.promote and not tie.needs_comparison and "not better (2 <= 2)" in tie.reason
    assert not is_improvement(2.0, True, 2.0)
    assert decide(has_incumbent=True, incumbent_score=2.0, challenger_score=2.000001).needs_comparison


def test_an_untimed_challenger_never_displaces_an_untimed_incumbent() -> None:
    assert not is_improvement(None, True, None)
    assert is_improvement(None, True, 0.5)  # a timed pass displaces an untimed incumbent
    assert is_improvement(5.0, False, None)  # the first pass, timed or not


def test_the_confirmation_tolerance_scales_the_incumbents_time() -> None:
    assert CONFIRM_TOLERANCE == 1.10
    assert confirmation_decision(passed=True, summary="", challenger_ms=10.5, incumbent_ms=10.0) is None
    assert confirmation_decision(passed=True, summary="", challenger_ms=11.0, incumbent_ms=10.0) is None  # the edge
    slower = confirmation_decision(passed=True, summary="", challenger_ms=11.01, incumbent_ms=10.0)
    assert slower is not None and not slower.promote and slower.confirmed_latency_ms == 11.01
    assert slower.reason == ("confirmed in leaderboard mode at 11.01 ms, slower than the incumbent's 10 ms")
    assert confirmation_decision(passed=True, summary="", challenger_ms=0.5, incumbent_ms=0.1) is not None


def test_a_passed_confirmation_without_a_time_is_not_refused() -> None:
    assert confirmation_decision(passed=True, summary="", challenger_ms=None, incumbent_ms=1.0) is None
    failed = confirmation_decision(passed=False, summary="incorrect on cfg3", challenger_ms=0.1, incumbent_ms=1.0)
    assert failed is not None and failed.reason == "not confirmed in leaderboard mode: incorrect on cfg3"


def test_the_paired_comparison_decides_with_its_numbers() -> None:
    kwargs = {"has_incumbent": True, "incumbent_score": 1.0, "challenger_score": 2.0}
    comparison = SimpleNamespace(speedup=1.5, ci_low=1.2, ci_high=1.8, improved=True)
    promoted = decide(**kwargs, comparison=comparison)
    assert promoted.promote and (promoted.speedup, promoted.ci_low, promoted.ci_high) == (1.5, 1.2, 1.8)
    assert promoted.reason == "paired comparison: speedup 1.5000x, 95% CI [1.2000, 1.8000]"
    refused = decide(**kwargs, comparison={"speedup": 1.5, "ci_low": 0.9, "ci_high": 1.8, "improved": False})
    assert not refused.promote and refused.ci_low == 0.9 and not refused.needs_comparison


class _PerConfig(BaseModel):
    config: str
    speedup: float


class _Comparison(BaseModel):
    speedup: float
    ci_low: float
    ci_high: float
    improved: bool
    per_config: list[_PerConfig]


def test_comparison_record_keeps_every_field_of_each_kind_of_comparison() -> None:
    as_dict = {"speedup": 1.1, "ci_low": 1.0, "ci_high": 1.2, "improved": False}
    assert comparison_record(as_dict) is as_dict
    model = _Comparison(
        speedup=1.3, ci_low=1.1, ci_high=1.5, improved=True, per_config=[_PerConfig(config="a", speedup=1.3)]
    )
    assert comparison_record(model) == {
        "speedup": 1.3,
        "ci_low": 1.1,
        "ci_high": 1.5,
        "improved": True,
        "per_config": [{"config": "a", "speedup": 1.3}],
    }
    plain = SimpleNamespace(
        speedup=1.3,
        ci_low=1.1,
        ci_high=1.5,
        improved=True,
        per_config=[_PerConfig(config="a", speedup=1.3), {"config": "b", "speedup": 1.0}],
    )
    assert comparison_record(plain) == {
        "speedup": 1.3,
        "ci_low": 1.1,
        "ci_high": 1.5,
        "improved": True,
        "per_config": [{"config": "a", "speedup": 1.3}, {"config": "b", "speedup": 1.0}],
    }
    bare = SimpleNamespace(speedup=1.3, ci_low=1.1, ci_high=1.5, improved=True)
    assert comparison_record(bare) == {"speedup": 1.3, "ci_low": 1.1, "ci_high": 1.5, "improved": True}
