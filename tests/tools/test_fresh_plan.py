"""``FreshPlan``, where a timing loop audits, decided with a scripted random source so each rule is pinned exactly:
one audit among the first ``first_within`` positions, each later position at ``rate``, at least one in two while the
loop is behind its minimum (but never before ``first_within``), and ``rerandomised`` counting only what it did."""

from __future__ import annotations

from typing import Any

import pytest

from ksearch.tools.timing.primitives import FreshPlan, rerandomised


class ScriptedRandom:
    """``randrange`` gives ``first``; ``random`` gives the next of ``draws`` and records what it was asked."""

    def __init__(self, first: int, draws: list[float] | None = None) -> None:
        self.first = first
        self.draws = list(draws or [])
        self.randrange_calls: list[int] = []
        self.random_calls = 0

    def randrange(self, n: int) -> int:
        self.randrange_calls.append(n)
        return self.first

    def random(self) -> float:
        self.random_calls += 1
        return self.draws.pop(0)


def _plan(first: int, draws: list[float] | None = None, **kwargs: Any) -> tuple[FreshPlan, ScriptedRandom]:
    rng = ScriptedRandom(first, draws)
    return FreshPlan(rng=rng, **kwargs), rng  # type: ignore[arg-type]


@pytest.mark.parametrize("first", [0, 1, 2])
def test_the_first_audit_is_the_drawn_position_among_the_first_three(first: int) -> None:
    plan, rng = _plan(first)
    wanted = [plan.wants(position) for position in range(first + 1)]
    assert wanted == [False] * first + [True]
    assert rng.randrange_calls == [3] and rng.random_calls == 0  # drawn once, and nothing else drawn before it


def test_the_first_position_is_drawn_once_however_often_it_is_asked() -> None:
    plan, rng = _plan(1, draws=[0.99, 0.99])
    plan.wants(0)
    plan.wants(1)
    plan.done = 2
    plan.wants(2)
    plan.wants(3)
    assert rng.randrange_calls == [3]


@pytest.mark.parametrize(("draw", "wanted"), [(0.0624, True), (0.0625, False), (0.5, False)])
def test_a_later_position_is_audited_when_the_draw_is_below_the_rate(draw: float, wanted: bool) -> None:
    plan, _ = _plan(0, draws=[draw], rate=0.0625)
    assert plan.wants(0)
    plan.done = 2  # the minimum is met: the plain rate applies
    assert plan.wants(5) is wanted


@pytest.mark.parametrize(("draw", "wanted"), [(0.49, True), (0.5, False)])
def test_a_loop_behind_its_minimum_audits_at_one_in_two_from_the_first_three_on(draw: float, wanted: bool) -> None:
    plan, _ = _plan(0, draws=[draw], rate=0.0625, minimum=2)
    assert plan.wants(0)
    plan.done = 1
    assert plan.wants(3) is wanted


def test_a_loop_behind_its_minimum_keeps_the_plain_rate_within_the_first_three() -> None:
    plan, _ = _plan(0, draws=[0.3], rate=0.0625, minimum=2)
    assert plan.wants(0)
    plan.done = 1
    assert not plan.wants(2)  # 0.3 would be an audit at one in two, not at the rate


def test_a_rate_above_one_in_two_is_kept_when_behind() -> None:
    plan, _ = _plan(0, draws=[0.7], rate=0.8, minimum=2)
    assert plan.wants(0)
    plan.done = 1
    assert plan.wants(4)


@pytest.mark.parametrize(("done", "satisfied"), [(0, False), (1, False), (2, True), (3, True)])
def test_a_plan_is_satisfied_at_its_minimum(done: int, satisfied: bool) -> None:
    plan, _ = _plan(0)
    plan.done = done
    assert plan.satisfied() is satisfied


class Runner:
    def __init__(self, values: Any) -> None:
        self.values = values
        self.rerandomised: list[tuple[Any, Any]] = []

    def fresh_values(self, call: Any) -> Any:
        return self.values

    def rerandomise(self, call: Any, values: Any) -> None:
        self.rerandomised.append((call, values))


def test_rerandomised_counts_an_audit_only_when_the_task_gave_new_values() -> None:
    plan, _ = _plan(0)
    refused = Runner(None)
    assert rerandomised(refused, "call", plan) is False  # type: ignore[arg-type]
    assert plan.done == 0 and refused.rerandomised == []
    given = Runner({"x": 1})
    assert rerandomised(given, "call", plan) is True  # type: ignore[arg-type]
    assert plan.done == 1 and given.rerandomised == [("call", {"x": 1})]
