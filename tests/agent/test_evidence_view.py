"""What the planner is shown about an ended cycle: every attempt's result and each shape against the base."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from ksearch.agent.evidence_text import versus
from ksearch.contracts.evaluation import Timing
from ksearch.store import Store
from ksearch.tasks.softmax import SoftmaxTask


def _timing(config: str, mean: float, median: float | None = None, headline: str = "mean") -> Timing:
    median = mean if median is None else median
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


def _attempt(store: Store, cycle: str, attempt: int, candidate: str | None, evaluation: str | None, **row) -> None:
    store.record_attempt(
        {
            "run_id": "r",
            "cycle_id": cycle,
            "attempt": attempt,
            "round_index": attempt,
            "node_id": "n",
            "prompt_kind": "improve",
            "candidate_id": candidate,
            "evaluation_id": evaluation,
            "verdict": row.get("verdict", "passed"),
            "score": None,
            "error": row.get("error"),
        }
    )


def test_every_attempt_of_a_cycle_is_shown_in_order_with_its_code_as_a_diff(tmp_path: Path) -> None:
    """Issue 33's search: the cycle's second attempt regressed by a third and the planner saw only its geomean; issue
    57: then only its per-shape times, never its profile, resources or code."""
    from ksearch.agent.state import CycleResult, SearchState
    from ksearch.agent.world_model import ROOT_ID, Action, Node, SolutionRef, WorldModel
    from ksearch.contracts.candidate import Candidate
    from ksearch.contracts.evaluation import Evaluation, Verdict
    from ksearch.nodes.plan import evidence_view

    store = Store(tmp_path / "ksearch.db")
    store.create_run({"id": "r", "task": "softmax", "model": "m"})

    def stored(code: str, ev: Evaluation) -> tuple[str, str]:
        cid = store.ensure_candidate(Candidate(task="softmax", language="triton", code=code))
        return cid, store.record_evaluation(cid, "key", ev)

    def passed(*timings: Timing) -> Evaluation:
        latency = timings[0].headline_ms
        return Evaluation(
            verdict=Verdict.PASSED,
            device="cuda",
            timed=True,
            latency_ms=latency,
            score=1 / latency,
            configs_passed=2,
            configs_total=2,
            timings=list(timings),
        )

    base_code = "def kernel(x):\n" + "".join(f"    a{i} = {i}\n" for i in range(30)) + "    return x\n"
    base = stored(base_code, passed(_timing("b0", 1.0, 1.0), _timing("b6", 4.0, 4.0)))
    first = stored(base_code.replace("a3 = 3", "a3 = 33"), passed(_timing("b0", 0.8, 0.8), _timing("b6", 3.9, 3.8)))
    broken = base_code.replace("a3 = 3", "a3 = 33").replace("a20 = 20", "a20 = oops")
    second = stored(broken, Evaluation(verdict=Verdict.COMPILE_ERROR, device="cuda", log="NameError: oops"))
    _attempt(store, "c1", 1, *first)
    _attempt(store, "c1", 2, *second, verdict="compile_error")
    _attempt(store, "c1", 3, None, None, verdict="no_code", error="the reply contained no usable code")
    wm = WorldModel(
        nodes={
            ROOT_ID: Node(id=ROOT_ID),
            "p": Node(
                id="p",
                parent_id=ROOT_ID,
                action=Action(title="do p"),
                solution=SolutionRef(candidate_id=base[0], evaluation_id=base[1], verdict="passed"),
            ),
            "a": Node(id="a", parent_id="p", action=Action(title="do a", expected_speedup=1.2)),
        }
    )
    result = CycleResult(
        cycle_id="c1",
        node_id="a",
        rounds=3,
        passed=True,
        stop_reason="attempt budget",
        base_candidate_id=base[0],
        best_candidate_id=first[0],
        best_evaluation_id=first[1],
    )
    ctx = SimpleNamespace(run_id="r", task=SoftmaxTask())
    view = evidence_view([result], SearchState(world_model=wm), store, ctx)  # type: ignore[arg-type]
    lines = view.splitlines()
    assert lines[0] == "## Cycle c1 on node a: do a"
    assert (
        lines[1] == "Started from: code 1 (the solution of node p, 1.0000 ms; whole at the end). Rounds: 3; ended by: "
        "attempt budget"
    )
    assert lines[2] == "Predicted speedup over the parent: 1.2x"
    heads = [line for line in lines if line.startswith("### Attempt")]
    assert heads == [
        "### Attempt 1 (round 1, improve): passed 2/2 configs, 0.8000 ms on cuda, x1.25 vs the parent (faster) "
        "(the best of the cycle)",
        "### Attempt 2 (round 2, improve): compile_error on cuda: NameError: oops",
        "### Attempt 3 (round 3, improve): no evaluation (the reply contained no usable code)",
    ]
    first_block = view[view.index(heads[0]) : view.index(heads[1])]
    assert "  b6: mean 3.9000 ms (median 3.8000)" in first_block and "parent 4.0000 ms, x1.03 (faster)" in first_block
    assert "attempt 1 of c1 as a diff against code 1:\n```diff\n--- code 1\n+++ attempt 1 of c1\n" in first_block
    assert "-    a3 = 3\n+    a3 = 33\n" in first_block
    second_block = view[view.index(heads[1]) : view.index(heads[2])]
    assert "Log:\nNameError: oops" in second_block and "+    a20 = oops" in second_block
    assert "-    a3 = 3\n" not in second_block  # against attempt 1, the code it edited
    assert view.endswith(f"### code 1: the solution of node p, 1.0000 ms\n```python\n{base_code.rstrip()}\n```")
    assert view.count(base_code.rstrip()) == 1


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
    ctx = SimpleNamespace(run_id="r", task=SoftmaxTask())
    view = evidence_view([result.model_copy(update={"promotion": promoted})], SearchState(world_model=wm), store, ctx)  # type: ignore[arg-type]
    assert view.endswith(f"\nPromotion: {promoted}")
    assert "Promotion:" not in evidence_view([result], SearchState(world_model=wm), store, ctx)  # type: ignore[arg-type]


def test_a_failed_cycle_its_logs_its_skill_and_an_untimed_parent(tmp_path: Path) -> None:
    """What a cycle block says besides its attempts' measurements: a failed cycle marks no attempt best, a failed
    attempt's log is quoted up to its bound (a passed one's never), the skill line names skill and cycle, and an
    untimed parent is named without a time."""
    from ksearch.agent.planner_evidence import LOG_CHARS
    from ksearch.agent.state import CycleResult, SearchState
    from ksearch.agent.world_model import ROOT_ID, Action, Node, SolutionRef, WorldModel
    from ksearch.contracts.candidate import Candidate
    from ksearch.contracts.evaluation import Evaluation, Verdict
    from ksearch.nodes import plan

    store = Store(tmp_path / "ksearch.db")
    store.create_run({"id": "r", "task": "softmax", "model": "m"})

    def stored(code: str, ev: Evaluation) -> tuple[str, str]:
        cid = store.ensure_candidate(Candidate(task="softmax", language="triton", code=code))
        return cid, store.record_evaluation(cid, "key", ev)

    base = stored("def kernel(x):\n    return x\n", Evaluation(verdict=Verdict.PASSED, device="cpu", log="note: fine"))
    broken = stored(
        "def kernel(x):\n    return y\n", Evaluation(verdict=Verdict.INCORRECT, device="cpu", log="e" * 1600)
    )
    _attempt(store, "c1", 1, *broken, verdict="incorrect")
    _attempt(store, "c1", 2, None, None, verdict="no_code", error="no code")
    silent = stored("def kernel(x):\n    return z\n", Evaluation(verdict=Verdict.COMPILE_ERROR, device="cpu", log=""))
    _attempt(store, "c1", 3, *silent, verdict="compile_error")
    wm = WorldModel(
        nodes={
            ROOT_ID: Node(id=ROOT_ID),
            "p": Node(
                id="p",
                parent_id=ROOT_ID,
                action=Action(title="p"),
                solution=SolutionRef(candidate_id=base[0], evaluation_id=base[1], verdict="passed"),
            ),
            "a": Node(id="a", parent_id="p", action=Action(title="do a", skill_id="sk-0123456789ab")),
        }
    )
    failed = CycleResult(cycle_id="c1", node_id="a", rounds=2, passed=False, stop_reason="s", base_candidate_id=base[0])
    ctx = SimpleNamespace(run_id="q", task=SoftmaxTask(), store=store)
    view = plan.planner_evidence.evidence_view(
        [failed], wm, store, run_id="r", skill_line=lambda skill, cycle: f"skill {skill} in {cycle}"
    )
    assert "Started from: code 1 (the solution of node p; whole at the end)." in view  # untimed: no time
    assert "\nskill sk-0123456789ab in c1\nOutcome: NOTHING PASSED." in view
    assert "Predicted speedup" not in view and "(the best of the cycle)" not in view
    assert f"Log:\n{'e' * (LOG_CHARS * 2 // 3)}\n... [100 characters cut] ...\n" in view
    assert "### Attempt 2 (round 2, improve): no evaluation (no code)" in view
    assert view.count("Log:") == 1  # the compile error without a log quotes none
    store.create_run({"id": "q", "task": "softmax", "model": "m"})
    store.record_attempt(
        {
            "run_id": "q",
            "cycle_id": "c2",
            "attempt": 1,
            "round_index": 1,
            "node_id": "a",
            "prompt_kind": "improve",
            "candidate_id": base[0],
            "evaluation_id": base[1],
            "verdict": "passed",
            "score": None,
            "error": None,
        }
    )
    passed = failed.model_copy(
        update={"cycle_id": "c2", "passed": True, "best_candidate_id": base[0], "best_evaluation_id": base[1]}
    )
    view = plan.evidence_view([passed], SearchState(world_model=wm), store, ctx)  # type: ignore[arg-type]
    assert "note: fine" not in view and "(the best of the cycle)" in view  # a passed attempt's log is not quoted
    assert "Applied skill sk-0123456789ab; no trial was recorded." in view
    store.close()


def test_the_bests_roofline_line_and_the_selection_rules_say_only_what_applies(tmp_path: Path) -> None:
    from ksearch.agent.selection import SelectionPolicy
    from ksearch.agent.state import BestRef
    from ksearch.contracts.candidate import Candidate
    from ksearch.contracts.evaluation import Evaluation, Verdict
    from ksearch.nodes.plan import best_evidence, selection_rules

    store = Store(tmp_path / "ksearch.db")
    cid = store.ensure_candidate(Candidate(task="softmax", language="triton", code="x = 1\n"))
    eid = store.record_evaluation(cid, "k", Evaluation(verdict=Verdict.PASSED, device="cpu"))
    assert best_evidence(BestRef(candidate_id=cid, evaluation_id=eid, node_id="a"), store) == ""  # no roofline
    assert best_evidence(BestRef(candidate_id=cid, evaluation_id="missing", node_id="a"), store) == ""
    store.close()
    assert "cycle explores" in selection_rules(SelectionPolicy(explore_every=4))
    assert "Every 4th cycle explores" in selection_rules(SelectionPolicy(explore_every=4))
    off = selection_rules(SelectionPolicy(max_difficulty=3, explore_every=0))
    assert "explores" not in off and "above difficulty 3 wait while easier ones exist" in off
