"""What the planner is shown about an ended cycle: every attempt's result and each shape against the base."""

from __future__ import annotations

from pathlib import Path

from ksearch.agent.evidence_text import versus
from ksearch.contracts.evaluation import Timing
from ksearch.nodes.plan import attempt_lines
from ksearch.store import Store


def _timing(config: str, mean: float, median: float, headline: str = "mean") -> Timing:
    return Timing(
        config=config,
        median_ms=median,
        mean_ms=mean,
        stdev_ms=0.01,
        samples=100,
        method="gpumode-benchmark",
        headline=headline,
    )


def test_describe_leads_with_the_statistic_the_score_uses() -> None:
    line = _timing("b0", mean=0.45, median=0.44).describe()
    assert line.startswith("b0: mean 0.4500 ms (median 0.4400)")
    robust = _timing("b0", mean=0.45, median=0.44, headline="median").describe()
    assert robust.startswith("b0: median 0.4400 ms (mean 0.4500)")


def test_each_shape_is_compared_with_the_base() -> None:
    now, base = _timing("b0", mean=0.5, median=0.5), _timing("b0", mean=0.4, median=0.4)
    assert versus(now, base, "base") == "; base 0.4000 ms, x0.80 (slower)"
    assert versus(now, None, "base") == ""


def test_the_rounds_of_a_cycle_are_listed_in_order(tmp_path: Path) -> None:
    store = Store(tmp_path / "ksearch.db")
    for attempt, (verdict, score, error) in enumerate(
        [
            ("passed", 1 / 1.53, None),
            ("passed", 1 / 1.21, None),
            ("compile_error", None, "out of resource: shared memory"),
        ],
        1,
    ):
        store.record_attempt(
            {
                "run_id": "r",
                "cycle_id": "c1",
                "attempt": attempt,
                "round_index": attempt,
                "node_id": "n",
                "prompt_kind": "improve",
                "candidate_id": f"c{attempt}",
                "evaluation_id": f"e{attempt}",
                "verdict": verdict,
                "score": score,
                "error": error,
            }
        )
    store.record_attempt(
        {
            "run_id": "r",
            "cycle_id": "c2",
            "attempt": 1,
            "round_index": 4,
            "node_id": "m",
            "prompt_kind": "improve",
            "candidate_id": "x",
            "evaluation_id": "y",
            "verdict": "passed",
            "score": 1.0,
            "error": None,
        }
    )
    lines = attempt_lines(store, "r", "c1")
    assert lines[0] == "Rounds of the cycle:"
    assert "attempt 1 (round 1, improve): passed, 1.5300 ms" in lines[1]
    assert "attempt 2 (round 2, improve): passed, 1.2100 ms" in lines[2]
    assert "compile_error" in lines[3] and "shared memory" in lines[3]
    assert len(lines) == 4
    assert attempt_lines(store, "r", "c2") == []  # one round: the outcome line says it all


def test_each_timed_attempt_of_a_cycle_shows_its_shapes(tmp_path: Path) -> None:
    """Issue 33's search: the cycle's second attempt regressed by a third and the planner saw only its geomean."""
    from ksearch.contracts.evaluation import Evaluation, Verdict

    store = Store(tmp_path / "ksearch.db")
    slower = Evaluation(
        verdict=Verdict.PASSED,
        device="cuda",
        configs_passed=2,
        configs_total=2,
        timings=[_timing("b0_n256_b2", mean=0.52, median=0.5), _timing("b6_n1024_b1", 3.9, 3.8)],
    )
    evaluation_id = store.record_evaluation("cand2", "key", slower)
    for attempt, eid in ((1, "missing"), (2, evaluation_id)):
        store.record_attempt(
            {
                "run_id": "r",
                "cycle_id": "c1",
                "attempt": attempt,
                "round_index": attempt,
                "node_id": "n",
                "prompt_kind": "improve",
                "candidate_id": f"cand{attempt}",
                "evaluation_id": eid,
                "verdict": "passed",
                "score": 1.0,
                "error": None,
            }
        )
    lines = attempt_lines(store, "r", "c1")
    assert (
        lines[2].startswith("  attempt 2")
        and lines[3] == "    per shape (ms, the score's statistic): b0 0.5200, b6 3.9000"
    )
    assert len(lines) == 4  # attempt 1's evaluation is not in the store: no shape line, no error


def test_the_plan_is_told_whether_the_cycles_best_was_promoted_and_on_what_measurement(tmp_path: Path) -> None:
    """Issue 33's search: a cycle's best read x1.005 faster and was not promoted (the paired comparison found no
    gain); another was promoted at x1.058 with a leaderboard-mode time. The planner saw neither decision."""
    from ksearch.agent.promotion import Decision, promotion_line
    from ksearch.agent.state import CycleResult, SearchState
    from ksearch.agent.world_model import ROOT_ID, Action, Node, WorldModel
    from ksearch.contracts.candidate import Candidate
    from ksearch.contracts.evaluation import Evaluation, Verdict
    from ksearch.nodes.plan import evidence_view

    store = Store(tmp_path / "ksearch.db")
    candidate = store.ensure_candidate(
        Candidate(task="trimul", language="triton", code="def custom_kernel(d):\n    pass\n")
    )
    evaluation = store.record_evaluation(
        candidate,
        "k",
        Evaluation(verdict=Verdict.PASSED, device="cuda", latency_ms=0.9335, score=1 / 0.9335, timed=True),
    )
    promoted = promotion_line(
        Decision(
            promote=True,
            reason="paired comparison: speedup 1.0576x, 95% CI [1.0504, 1.0649]",
            speedup=1.0576,
            ci_low=1.0504,
            ci_high=1.0649,
            confirmed_latency_ms=1.0495,
        )
    )
    assert promoted == (
        "promoted, the run's new best (paired comparison: speedup 1.0576x, 95% CI [1.0504, 1.0649]); "
        "leaderboard-mode confirmation 1.0495 ms"
    )
    kept = promotion_line(Decision(promote=False, reason="single measurement not better (1.06 <= 1.07)"))
    assert kept == "not promoted (single measurement not better (1.06 <= 1.07))"
    wm = WorldModel(
        nodes={ROOT_ID: Node(id=ROOT_ID), "a": Node(id="a", parent_id=ROOT_ID, action=Action(title="do a"))}
    )
    result = CycleResult(
        cycle_id="c1",
        node_id="a",
        rounds=1,
        passed=True,
        stop_reason="x",
        best_candidate_id=candidate,
        best_evaluation_id=evaluation,
    )
    view = evidence_view([result.model_copy(update={"promotion": promoted})], SearchState(world_model=wm), store)
    assert f"\nPromotion: {promoted}\n" in view
    assert "Promotion:" not in evidence_view([result], SearchState(world_model=wm), store)  # before prune decides
