"""Promotion by statistics: the pure rule, and prune's use of a (fake) paired comparison, stored for resume."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from ksearch.agent.config import RunConfig
from ksearch.agent.context import SearchContext
from ksearch.agent.promotion import decide, is_improvement, paired_comparison
from ksearch.agent.state import BestRef
from ksearch.nodes.prune import promotion_decision
from ksearch.store import Store, find_comparison
from ksearch.tasks.softmax import SoftmaxTask
from ksearch.tools.gpu_pool import GpuPool


class FakeComparison(SimpleNamespace):
    def model_dump(self, mode: str = "python") -> dict:
        return dict(vars(self))


def _cmp(speedup: float, low: float, high: float) -> FakeComparison:
    return FakeComparison(speedup=speedup, ci_low=low, ci_high=high, improved=low > 1.0, per_config=[])


def test_first_pass_wins_and_untimed_never_displaces() -> None:
    assert decide(has_incumbent=False, incumbent_score=None, challenger_score=None).promote
    untimed = decide(has_incumbent=True, incumbent_score=None, challenger_score=None)
    assert not untimed.promote and not untimed.needs_comparison
    assert not decide(has_incumbent=True, incumbent_score=2.0, challenger_score=None).promote
    assert decide(has_incumbent=True, incumbent_score=None, challenger_score=1.0).promote


def test_a_slower_single_measurement_is_not_compared() -> None:
    d = decide(has_incumbent=True, incumbent_score=2.0, challenger_score=1.9)
    assert not d.promote and not d.needs_comparison


def test_a_faster_single_measurement_needs_a_paired_comparison() -> None:
    d = decide(has_incumbent=True, incumbent_score=2.0, challenger_score=2.1)
    assert not d.promote and d.needs_comparison
    confirmed = decide(has_incumbent=True, incumbent_score=2.0, challenger_score=2.1, comparison=_cmp(1.05, 1.02, 1.08))
    assert confirmed.promote and confirmed.speedup == pytest.approx(1.05) and "1.0200" in confirmed.reason
    noise = decide(has_incumbent=True, incumbent_score=2.0, challenger_score=2.1, comparison=_cmp(1.01, 0.97, 1.05))
    assert not noise.promote and "not significant" in noise.reason and noise.ci_low == pytest.approx(0.97)
    as_dict = decide(
        has_incumbent=True,
        incumbent_score=2.0,
        challenger_score=2.1,
        comparison={"speedup": 1.2, "ci_low": 1.1, "ci_high": 1.3, "improved": True},
    )
    assert as_dict.promote


def test_without_compare_the_single_measurement_rule_applies() -> None:
    d = decide(has_incumbent=True, incumbent_score=2.0, challenger_score=2.1, can_compare=False)
    assert d.promote and "no paired comparison" in d.reason
    assert is_improvement(2.0, True, 2.1) and not is_improvement(2.0, True, 1.0) and is_improvement(None, False, None)


def _ctx(tmp_path: Path, compare, *, pool: GpuPool | None = None) -> SearchContext:
    """A real context; the LLM and the evaluator are never reached by promotion, so they are left out."""
    config = RunConfig(
        run_id="r",
        task="softmax",
        model="replay:unused.jsonl",
        device="cuda",
        compile_timeout_s=10.0,
        run_timeout_s=10.0,
        promotion_rounds=3,
    )
    return SearchContext(
        config=config,
        store=Store(tmp_path / "ksearch.db"),
        task=SoftmaxTask(),
        llm=None,
        evaluate=None,
        eval_key="k",
        device_description="",
        gpu_pool=pool,
        compare=compare,
    )


def _candidate(store: Store, n: int) -> str:
    from ksearch.contracts.candidate import Candidate

    return store.ensure_candidate(
        Candidate(task="softmax", language="triton", code=f"def kernel(x):\n    return {n}\n")
    )


def test_prune_measures_once_on_a_leased_gpu_and_reuses_the_stored_comparison(tmp_path: Path) -> None:
    calls = []
    pool = GpuPool(["cuda:1"])

    def fake_compare(incumbent, challenger, *, rounds):
        calls.append((incumbent.candidate.code, challenger.candidate.code, incumbent.device, rounds, pool.free))
        return _cmp(1.10, 1.04, 1.16)

    ctx = _ctx(tmp_path, fake_compare, pool=pool)
    incumbent, challenger = _candidate(ctx.store, 1), _candidate(ctx.store, 2)
    best = BestRef(candidate_id=incumbent, evaluation_id="e1", node_id="n1", score=2.0)
    first = promotion_decision(ctx, best, challenger, 2.2)
    assert first.promote and first.speedup == pytest.approx(1.10)
    assert len(calls) == 1 and calls[0][2] == "cuda:1" and calls[0][3] == 3 and calls[0][4] == 0  # leased during
    assert pool.free == 1
    stored = find_comparison(ctx.store, incumbent, challenger, "k")
    assert stored is not None and stored["ci_low"] == pytest.approx(1.04)
    again = promotion_decision(ctx, best, challenger, 2.2)  # a resumed prune: same decision, no new measurement
    assert again == first and len(calls) == 1


def test_a_failed_comparison_keeps_the_incumbent(tmp_path: Path) -> None:
    def broken(incumbent, challenger, *, rounds):
        raise RuntimeError("challenger crashed while being timed")

    ctx = _ctx(tmp_path, broken)
    incumbent, challenger = _candidate(ctx.store, 1), _candidate(ctx.store, 2)
    best = BestRef(candidate_id=incumbent, evaluation_id="e1", node_id="n1", score=2.0)
    decision = promotion_decision(ctx, best, challenger, 3.0)
    assert not decision.promote and "failed" in decision.reason
    assert find_comparison(ctx.store, incumbent, challenger, "k") is None


def test_on_cpu_there_is_no_comparison(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, None)
    incumbent, challenger = _candidate(ctx.store, 1), _candidate(ctx.store, 2)
    best = BestRef(candidate_id=incumbent, evaluation_id="e1", node_id="n1", score=None)
    assert not promotion_decision(ctx, best, challenger, None).promote  # untimed never displaces
    assert promotion_decision(ctx, None, challenger, None).promote  # first pass wins


@pytest.mark.gpu
def test_the_real_compare_confirms_a_clear_improvement(tmp_path: Path) -> None:
    """A slow honest kernel (a Python loop of launches) vs the one-launch kernel: the paired comparison must promote."""
    from ksearch.tools.evaluator import compare

    data = Path(__file__).resolve().parents[1] / "tasks" / "data"
    fast = (data / "softmax_triton_ok.py").read_text()
    slow = fast.replace("    _softmax_row[(m,)](", "    for _ in range(3):\n        _softmax_row[(m,)](")
    ctx = _ctx(tmp_path, compare, pool=GpuPool(["cuda:0"]))
    incumbent, challenger = ctx.store.ensure_candidate(_code(slow)), ctx.store.ensure_candidate(_code(fast))
    best = BestRef(candidate_id=incumbent, evaluation_id="e1", node_id="n1", score=1.0)
    decision = promotion_decision(ctx, best, challenger, 2.0)
    assert decision.promote, decision.reason
    assert decision.ci_low is not None and decision.ci_low > 1.0


def _code(code: str):
    from ksearch.contracts.candidate import Candidate

    return Candidate(task="softmax", language="triton", code=code)


def _evaluation(verdict: str, latency_ms: float | None):
    from ksearch.contracts.evaluation import Evaluation, Verdict

    return Evaluation(
        verdict=Verdict(verdict),
        device="cuda",
        latency_ms=latency_ms,
        score=None if latency_ms is None else 1 / latency_ms,
        timed=latency_ms is not None,
    )


def test_a_new_best_is_confirmed_in_leaderboard_mode_once_and_the_confirmation_is_stored(tmp_path: Path) -> None:
    """Issue 30: before a timed candidate becomes the best it is evaluated with the ``confirm`` method (fresh inputs
    and a check on every repeat); the evaluation is stored, so a resumed prune does not measure it again."""
    from ksearch.nodes.prune import confirm_key

    asked = []

    def evaluate(request):
        asked.append((request.candidate.code, request.timing_method, request.device))
        return _evaluation("passed", 1.0)

    ctx = _ctx(tmp_path, None)
    ctx.evaluate, ctx.confirm_bests = evaluate, True
    challenger = _candidate(ctx.store, 2)
    first = promotion_decision(ctx, None, challenger, 2.0)
    assert first.promote and first.confirmed_latency_ms == 1.0
    assert asked == [("def kernel(x):\n    return 2\n", "confirm", "cuda")]
    assert ctx.store.find_evaluation(challenger, confirm_key("k")) is not None
    assert promotion_decision(ctx, None, challenger, 2.0) == first and len(asked) == 1


def test_a_candidate_that_fails_its_confirmation_is_not_promoted(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, None)
    ctx.evaluate, ctx.confirm_bests = (lambda request: _evaluation("incorrect", None)), True
    decision = promotion_decision(ctx, None, _candidate(ctx.store, 2), 2.0)
    assert not decision.promote and "not confirmed in leaderboard mode" in decision.reason


def test_a_challenger_confirmed_clearly_slower_than_the_incumbent_is_not_promoted(tmp_path: Path) -> None:
    """Its own score (and a paired comparison it might fool) say faster; the two leaderboard-mode times say it is
    not: the comparison is never asked for."""
    times = {"def kernel(x):\n    return 1\n": 1.0, "def kernel(x):\n    return 2\n": 1.2}
    compared = []
    ctx = _ctx(tmp_path, lambda *a, **k: compared.append(1))
    ctx.evaluate, ctx.confirm_bests = (lambda request: _evaluation("passed", times[request.candidate.code])), True
    incumbent, challenger = _candidate(ctx.store, 1), _candidate(ctx.store, 2)
    best = BestRef(candidate_id=incumbent, evaluation_id="e1", node_id="n1", score=1.0)
    decision = promotion_decision(ctx, best, challenger, 3.0)
    assert not decision.promote and "slower than the incumbent's" in decision.reason and not compared
    times["def kernel(x):\n    return 2\n"] = 1.05  # within the tolerance: the paired comparison decides
    ctx2 = _ctx(tmp_path / "b", lambda i, c, *, rounds: _cmp(1.1, 1.02, 1.2))
    ctx2.evaluate, ctx2.confirm_bests = ctx.evaluate, True
    incumbent, challenger = _candidate(ctx2.store, 1), _candidate(ctx2.store, 2)
    best = BestRef(candidate_id=incumbent, evaluation_id="e1", node_id="n1", score=1.0)
    assert promotion_decision(ctx2, best, challenger, 3.0).promote


def test_confirmation_decision_boundaries() -> None:
    from ksearch.agent.promotion import CONFIRM_TOLERANCE, confirmation_decision

    assert confirmation_decision(passed=True, summary="", challenger_ms=1.1, incumbent_ms=1.0) is None  # at the edge
    assert confirmation_decision(passed=True, summary="", challenger_ms=1.1001, incumbent_ms=1.0) is not None
    assert CONFIRM_TOLERANCE == 1.10
    assert confirmation_decision(passed=True, summary="", challenger_ms=5.0, incumbent_ms=None) is None
    assert (
        confirmation_decision(passed=False, summary="incorrect", challenger_ms=None, incumbent_ms=1.0).promote is False
    )


def test_the_shared_paired_comparison_is_measured_once_and_stores_nothing_it_did_not_measure(tmp_path: Path) -> None:
    """The one lookup-measure-store behind prune, skill learning and the skills flow."""
    store = Store(tmp_path / "ksearch.db")
    a, b = _candidate(store, 1), _candidate(store, 2)
    calls = []

    def measure(incumbent_id: str, challenger_id: str) -> FakeComparison:
        calls.append((incumbent_id, challenger_id))
        return _cmp(1.2, 1.1, 1.3)

    assert paired_comparison(store, a, b, "k", lambda i, c: None) is None  # nothing timed: nothing stored
    assert find_comparison(store, a, b, "k") is None
    with pytest.raises(RuntimeError):
        paired_comparison(store, a, b, "k", lambda i, c: (_ for _ in ()).throw(RuntimeError("crashed")))
    assert find_comparison(store, a, b, "k") is None
    first = paired_comparison(store, a, b, "k", measure)
    assert first is not None and first["ci_low"] == pytest.approx(1.1) and calls == [(a, b)]
    assert paired_comparison(store, a, b, "k", measure) == first and len(calls) == 1  # stored: not measured again
    assert find_comparison(store, b, a, "k") is None  # stored under (incumbent, challenger)
