"""``KSEARCH_AUDIT_RATE``: how often a timing loop re-randomises its inputs and audits the call, chosen by the parent
and recorded with each evaluation; a loop still audits at least twice at rate 0."""

from __future__ import annotations

import random

import pytest

from ksearch import settings
from ksearch.contracts.evaluation import Verdict
from ksearch.errors import UserError
from ksearch.tasks.trimul import TrimulTask
from ksearch.tools.evaluator.parent.evaluate import audit_rate
from ksearch.tools.timing.methods import get_method
from ksearch.tools.timing.primitives import AUDIT_RATE, FreshPlan


@pytest.mark.parametrize(
    ("text", "expected"), [(None, AUDIT_RATE), ("", AUDIT_RATE), ("0", 0.0), ("0.04", 0.04), ("1", 1.0)]
)
def test_the_rate_is_read_from_the_variable(text: str | None, expected: float, monkeypatch: pytest.MonkeyPatch) -> None:
    if text is None:
        monkeypatch.delenv(settings.AUDIT_RATE.name, raising=False)
    else:
        monkeypatch.setenv(settings.AUDIT_RATE.name, text)
    assert audit_rate() == expected


@pytest.mark.parametrize("text", ["-0.1", "1.5", "often", "nan"])
def test_a_rate_outside_zero_to_one_is_refused_with_what_to_give(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(settings.AUDIT_RATE.name, text)
    with pytest.raises(UserError, match="give a number from 0 to 1"):
        audit_rate()


def test_methods_that_audit_at_random_repeats_take_the_rate_and_the_others_ignore_it() -> None:
    assert get_method("gpumode-benchmark", audit_rate=0.0).audit_rate == 0.0  # type: ignore[attr-defined]
    assert get_method("robust", audit_rate=0.5).audit_rate == 0.5  # type: ignore[attr-defined]
    assert get_method("gpumode-benchmark").audit_rate == AUDIT_RATE  # type: ignore[attr-defined]
    for name in ("gpumode", "confirm", "flashinfer"):  # every repeat checked, or one audit per trial
        assert not hasattr(get_method(name, audit_rate=0.5), "audit_rate")


@pytest.mark.parametrize(("rate", "least", "most"), [(0.0, 2, 2), (AUDIT_RATE, 2, 100), (1.0, 98, 100)])
def test_a_plans_audits_follow_its_rate_and_never_fall_below_the_minimum(rate: float, least: int, most: int) -> None:
    for seed in range(20):
        plan = FreshPlan(rate=rate, rng=random.Random(seed))
        for position in range(100):
            if plan.wants(position):
                plan.done += 1
        assert least <= plan.done <= most and plan.satisfied()


def test_the_parent_asks_for_the_rate_and_the_worker_times_with_it(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from ksearch.contracts.candidate import Candidate
    from ksearch.tools.evaluator import EvalRequest
    from ksearch.tools.evaluator.parent.evaluate import build_worker_request
    from ksearch.tools.evaluator.worker.main import timing_method

    task = TrimulTask()
    request = EvalRequest(candidate=Candidate(task="trimul", language="triton", code="x = 1\n"), device="cpu")
    for text, rate in ((None, AUDIT_RATE), ("0.04", 0.04)):
        if text is None:
            monkeypatch.delenv(settings.AUDIT_RATE.name, raising=False)
        else:
            monkeypatch.setenv(settings.AUDIT_RATE.name, text)
        asked = build_worker_request(request, tmp_path, tmp_path / "r.json", task, "gpumode-benchmark", salt=1)
        assert asked.audit_rate == rate
        assert timing_method(asked).audit_rate == rate  # type: ignore[attr-defined]


@pytest.mark.serial
def test_an_honest_evaluation_records_the_rate_it_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end on the CPU's timing at 0.25 (four times the default rate): an honest kernel passes, its audits
    reached the checker, and the rate is in the evaluation's record, with the device it leased and when its worker
    was timing (what ``bench/throughput.py`` reads to show no two evaluations were timed on one GPU at once)."""
    import time

    from ksearch.tools.evaluator import EvalRequest, evaluate

    task = TrimulTask()
    monkeypatch.setenv("KSEARCH_CPU_TIMING", "1")
    monkeypatch.setenv(settings.AUDIT_RATE.name, "0.25")
    began = time.time()
    evaluation = evaluate(
        EvalRequest(
            candidate=task.reference_candidate(),
            device="cpu",
            timing=True,
            timing_method="gpumode-benchmark",
            run_timeout_s=240.0,
        )
    )
    assert evaluation.verdict == Verdict.PASSED, evaluation.log
    assert evaluation.environment["audit_rate"] == "0.25"
    _, _, audits = evaluation.environment["audits_prepared"].partition(" of ")
    assert int(audits) >= 2 * len(task.benchmark_configs("cpu"))
    assert evaluation.environment["leased_device"] == "cpu"
    start, end = (float(x) for x in evaluation.environment["timed_epoch_s"].split("-"))
    assert began < start < end < time.time()
