"""Cycle bookkeeping: prompt choice, the two stagnation streaks, and the stop rule."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ksearch.agent.cycle_logic import (
    CycleProgress,
    PromptKind,
    StopReason,
    choose_prompt,
    cycle_should_stop,
    record_round,
)


def _run(rounds: list[tuple[bool, float | None]], base_score: float | None = None) -> list[CycleProgress]:
    """Fold (passed, score) rounds; returns the progress after each round."""
    progress = CycleProgress()
    out = []
    for k, (passed, score) in enumerate(rounds, start=1):
        progress = record_round(
            progress, passed=passed, score=score, candidate_id=f"c{k}", evaluation_id=f"e{k}", base_score=base_score
        )
        out.append(progress)
    return out


# ---- prompt choice --------------------------------------------------------------------------------------------------


def test_first_attempt_depends_on_base_code() -> None:
    assert choose_prompt(1, True, None, False) == PromptKind.ACTION_ON_BASE
    assert choose_prompt(1, False, None, False) == PromptKind.ACTION_FROM_SPEC


def test_later_attempts_follow_the_last_outcome() -> None:
    assert choose_prompt(2, True, False, False) == PromptKind.DEBUG
    assert choose_prompt(2, False, True, True) == PromptKind.IMPROVE
    # a failed last attempt is debugged even if an earlier attempt passed
    assert choose_prompt(5, True, False, True) == PromptKind.DEBUG
    # unknown last outcome falls back to 'any pass in this cycle'
    assert choose_prompt(3, True, None, True) == PromptKind.IMPROVE
    assert choose_prompt(3, True, None, False) == PromptKind.DEBUG
    assert PromptKind.IMPROVE == "improve"
    with pytest.raises(ValueError):
        choose_prompt(0, True, None, False)


# ---- no_improve_streak -----------------------------------------------------------------------------------------------


def test_no_improve_streak_counts_failures_and_non_improving_passes() -> None:
    states = _run([(False, None), (False, None), (True, 1.0), (True, 0.9), (True, 1.0), (False, None), (True, 1.5)])
    assert [s.no_improve_streak for s in states] == [1, 2, 0, 1, 2, 3, 0]
    assert [s.attempts for s in states] == [1, 2, 3, 4, 5, 6, 7]
    assert [s.last_passed for s in states] == [False, False, True, True, True, False, True]
    final = states[-1]
    assert (final.best_score, final.best_candidate_id, final.best_evaluation_id) == (1.5, "c7", "e7")
    assert final.passed_any is True
    # the best is kept through non-improving rounds
    assert (states[4].best_score, states[4].best_candidate_id) == (1.0, "c3")


def test_first_pass_always_improves_even_without_scores() -> None:
    states = _run([(False, None), (True, None), (True, None), (True, None)])
    assert [s.no_improve_streak for s in states] == [1, 0, 1, 2]
    assert states[-1].best_candidate_id == "c2"
    assert states[-1].best_score is None
    # a scored pass beats an unscored best
    after = record_round(states[-1], passed=True, score=0.5, candidate_id="c5", evaluation_id="e5", base_score=None)
    assert (after.no_improve_streak, after.best_candidate_id, after.best_score) == (0, "c5", 0.5)


def test_first_pass_with_low_score_still_improves() -> None:
    states = _run([(True, 0.001), (True, 0.001)])
    assert [s.no_improve_streak for s in states] == [0, 1]


def test_progress_is_immutable_and_copy_on_write() -> None:
    start = CycleProgress()
    after = record_round(start, passed=True, score=1.0, candidate_id="c", evaluation_id="e", base_score=None)
    assert start == CycleProgress() and start.attempts == 0
    assert after.attempts == 1
    with pytest.raises(ValidationError):
        start.attempts = 3  # type: ignore[misc]


# ---- no_improve_over_base_streak -------------------------------------------------------------------------------------


def test_over_base_streak_starts_only_after_a_pass() -> None:
    states = _run([(False, None), (False, None), (True, 1.0), (True, 1.5), (False, None), (True, 2.5)], base_score=2.0)
    assert [s.no_improve_over_base_streak for s in states] == [0, 0, 1, 2, 3, 0]
    assert [s.no_improve_streak for s in states] == [1, 2, 0, 0, 1, 0]


def test_over_base_streak_equal_to_base_counts_and_beating_resets() -> None:
    states = _run([(True, 2.0), (True, 2.0), (True, 2.1), (False, None)], base_score=2.0)
    assert [s.no_improve_over_base_streak for s in states] == [1, 2, 0, 0]


def test_over_base_streak_inactive_without_positive_base() -> None:
    rounds: list[tuple[bool, float | None]] = [(True, 1.0), (True, 0.5), (True, 0.4)]
    for base in (None, 0.0, -1.0):
        assert [s.no_improve_over_base_streak for s in _run(rounds, base_score=base)] == [0, 0, 0]


def test_over_base_streak_unscored_best_cannot_beat_base() -> None:
    states = _run([(True, None), (True, None)], base_score=1.0)
    assert [s.no_improve_over_base_streak for s in states] == [1, 2]


def test_over_base_streak_stays_off_for_a_zero_base_even_without_scores() -> None:
    """A base of 0 is no base (the parent was untimed): unscored passes do not count against it either."""
    for base in (0.0, -1.0):
        assert [s.no_improve_over_base_streak for s in _run([(True, None), (True, None)], base_score=base)] == [0, 0]


# ---- stop rule ------------------------------------------------------------------------------------------------------


def test_all_failing_cycle_lasts_exactly_window_rounds() -> None:
    states = _run([(False, None)] * 5)
    reasons = [cycle_should_stop(s, window=3, attempt_budget=100) for s in states]
    assert reasons == [None, None, StopReason.STAGNATION, StopReason.STAGNATION, StopReason.STAGNATION]
    assert reasons[2] == "stagnation"


def test_stop_on_no_improvement_over_base() -> None:
    states = _run([(True, 1.0), (True, 1.1), (True, 1.2)], base_score=5.0)
    assert [cycle_should_stop(s, window=3, attempt_budget=100) for s in states] == [
        None,
        None,
        "no improvement over base",
    ]


def test_stop_on_attempt_budget_and_priority() -> None:
    states = _run([(True, 1.0), (True, 2.0), (True, 3.0)])
    assert [cycle_should_stop(s, window=2, attempt_budget=3) for s in states] == [None, None, "attempt budget"]
    assert cycle_should_stop(CycleProgress(), window=2, attempt_budget=0) == StopReason.ATTEMPT_BUDGET
    both = CycleProgress(attempts=4, no_improve_streak=2, no_improve_over_base_streak=2)
    assert cycle_should_stop(both, window=2, attempt_budget=4) == StopReason.STAGNATION
    with pytest.raises(ValueError):
        cycle_should_stop(CycleProgress(), window=0, attempt_budget=5)


def test_stop_reason_is_a_plain_string() -> None:
    reason = cycle_should_stop(CycleProgress(no_improve_streak=1), window=1, attempt_budget=5)
    assert reason == "stagnation" and type(reason) is str
