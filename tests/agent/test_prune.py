"""The prune node (``ksearch.nodes.prune``) called directly, with fakes whose calls are asserted: how cycle results are
folded into the tree (every field of the attached evidence, the planner's ``regression_vs_parent`` at its edge), what
is streamed and stored, which order the paired comparison receives its two kernels in, the confirmation of the
incumbent, a person's approval, and the budgets."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from ksearch.agent.config import RunConfig
from ksearch.agent.context import SearchContext
from ksearch.agent.promotion import Decision
from ksearch.agent.state import BestRef, CycleResult, SearchState
from ksearch.agent.world_model import ROOT_ID, Action, Node, NodeStatus, WorldModel
from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation, Verdict
from ksearch.graph import route_after_prune
from ksearch.nodes import prune as prune_node
from ksearch.nodes.prune import approved_decision, budget_exhausted, confirm_key, prune
from ksearch.store import Store, find_comparison
from ksearch.store.steering import APPLIED, PENDING, add_act, list_acts
from ksearch.tasks.softmax import SoftmaxTask


class FakeLLM:
    """Only what prune asks of the client: whether its budget is spent."""

    def __init__(self, reason: str | None = None) -> None:
        self.reason = reason
        self.asked = 0

    def budget_exceeded(self) -> str | None:
        self.asked += 1
        return self.reason


def _ctx(
    tmp_path: Path,
    *,
    compare=None,
    evaluate=None,
    max_rounds: int = 20,
    llm: FakeLLM | None = None,
    confirm: bool = False,
) -> SearchContext:
    config = RunConfig(
        run_id="r",
        task="softmax",
        model="replay:unused.jsonl",
        device="cuda",
        max_rounds=max_rounds,
        promotion_rounds=4,
    )
    store = Store(tmp_path / "ksearch.db")
    store.create_run({"id": "r", "task": "softmax", "model": "replay", "config": config.model_dump(mode="json")})
    return SearchContext(
        config=config,
        store=store,
        task=SoftmaxTask(),
        llm=llm or FakeLLM(),
        evaluate=evaluate,
        eval_key="k",
        device_description="",
        compare=compare,
        confirm_bests=confirm,
    )


class Events:
    def __init__(self) -> None:
        self.seen: list[dict] = []

    def __call__(self, event: dict) -> None:
        self.seen.append(event)

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.seen if e["event"] == kind]


def _runtime(ctx: SearchContext) -> tuple[SimpleNamespace, Events]:
    events = Events()
    return SimpleNamespace(context=ctx, stream_writer=events), events


def _code(n: int) -> str:
    return f"def kernel(x):\n    return {n}\n"


def _candidate(ctx: SearchContext, n: int) -> str:
    return ctx.store.ensure_candidate(Candidate(task="softmax", language="triton", code=_code(n)))


def _evaluated(ctx: SearchContext, n: int, score: float | None, verdict: str = "passed") -> tuple[str, str]:
    """(candidate id, evaluation id) of a stored evaluation with ``score`` (latency 1/score)."""
    candidate = _candidate(ctx, n)
    latency = None if score is None else 1.0 / score
    evaluation = Evaluation(
        verdict=Verdict(verdict), device="cuda", latency_ms=latency, score=score, timed=score is not None
    )
    return candidate, ctx.store.record_evaluation(candidate, "k", evaluation)


def _tree(*ids: str) -> WorldModel:
    nodes = {ROOT_ID: Node(id=ROOT_ID)}
    for node_id in ids:
        nodes[node_id] = Node(id=node_id, parent_id=ROOT_ID, action=Action(title=f"do {node_id}"))
    return WorldModel(nodes=nodes)


def _result(
    cycle_id: str, node_id: str, rounds: int, ids: tuple[str, str] | None, base: float | None = None
) -> CycleResult:
    candidate, evaluation = ids if ids else (None, None)
    return CycleResult(
        cycle_id=cycle_id,
        node_id=node_id,
        rounds=rounds,
        passed=ids is not None,
        stop_reason="x",
        base_score=base,
        best_candidate_id=candidate,
        best_evaluation_id=evaluation,
    )


# ---- folding cycle results ------------------------------------------------------------------------------------------


def test_prune_folds_each_result_in_cycle_order_with_every_field_of_the_evidence(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    runtime, events = _runtime(ctx)
    a_ids = _evaluated(ctx, 1, 4.0)  # latency 0.25 ms
    state = SearchState(
        world_model=_tree("a", "b"),
        step=3,
        rounds_used=5,
        cycle_results=[_result("c2", "b", 3, None), _result("c1", "a", 2, a_ids, base=5.0)],
    )
    out = prune(state, runtime)
    wm = out["world_model"]
    solution = wm.nodes["a"].solution
    assert solution is not None
    assert (solution.candidate_id, solution.evaluation_id, solution.verdict) == (a_ids[0], a_ids[1], "passed")
    assert (solution.score, solution.latency_ms) == (4.0, 0.25)
    assert solution.round_index == 7  # 5 used before + 2 of c1 (folded first: cycle order, not list order)
    assert solution.regression_vs_parent is True  # 4.0 < the parent's 5.0, beyond noise
    assert (solution.vs_parent, solution.vs_parent_within_noise) == (0.8, False)
    assert wm.nodes["a"].status == NodeStatus.SOLVED and wm.nodes["a"].cycles == 1
    assert wm.nodes["b"].status == NodeStatus.FAILED and wm.nodes["b"].solution is None
    assert wm.active_leaf_id == "b"  # the last folded
    assert out["rounds_used"] == 10 and out["step"] == 4 and out["cycle_results"] is None
    assert out["done_reason"] is None
    # the results in cycle order, each passed one with what promotion decided (the next plan shows it)
    folded, failed = out["evidence"]
    assert failed == state.cycle_results[0] and failed.promotion is None
    assert folded == state.cycle_results[1].model_copy(update={"promotion": folded.promotion})
    assert folded.promotion.startswith("promoted, the run's new best (")
    assert out["best"] == BestRef(
        candidate_id=a_ids[0], evaluation_id=a_ids[1], node_id="a", score=4.0, latency_ms=0.25
    )
    assert events.of("pruned") == [{"event": "pruned", "rounds_used": 10, "done_reason": None}]
    assert [e["node_id"] for e in events.of("new_best")] == ["a"]
    promotion = events.of("promotion")[0]
    assert promotion["node_id"] == "a" and promotion["promote"] is True and "needs_comparison" not in promotion
    run = ctx.store.get_run("r")
    assert (run["rounds_used"], run["best_candidate_id"], run["best_evaluation_id"], run["best_score"]) == (
        10,
        a_ids[0],
        a_ids[1],
        4.0,
    )
    (snapshot,) = ctx.store.list_snapshots("r")
    assert snapshot["step"] == 3 and snapshot["label"] == "prune"
    assert WorldModel.model_validate_json(snapshot["world_model"]) == wm


@pytest.mark.parametrize(
    ("base", "score", "regression", "within_noise"),
    [
        (5.0, 5.0, False, True),
        (5.0, 4.8, True, False),
        (5.0, 4.95, False, True),  # 1 % lower: inside the 2 % floor, no regression (issue 57)
        (None, 1.0, False, False),
        (5.0, None, False, False),
        (0.5, 0.6, False, False),
        (3.0, 2.0, True, False),  # vs_parent 0.6667: four decimals
    ],
)
def test_regression_vs_parent_is_a_lower_score_beyond_the_noise_band(
    tmp_path, base, score, regression, within_noise
) -> None:
    """Without the parent's evaluation (no spreads) the band is the 2 % floor; with it, the measured spread counts
    too (tests/agent/test_prompt_defects.py)."""
    ctx = _ctx(tmp_path)
    ids = _evaluated(ctx, 1, score)
    state = SearchState(world_model=_tree("a"), cycle_results=[_result("c1", "a", 1, ids, base=base)])
    solution = prune(state, _runtime(ctx)[0])["world_model"].nodes["a"].solution
    assert solution is not None and solution.regression_vs_parent is regression
    assert solution.vs_parent_within_noise is within_noise
    expected = None if base is None or score is None else round(score / base, 4)
    assert solution.vs_parent == expected


@pytest.mark.parametrize("missing", ["passed", "best_candidate_id", "best_evaluation_id"])
def test_a_result_without_a_pass_or_its_ids_marks_the_action_failed(tmp_path: Path, missing: str) -> None:
    ctx = _ctx(tmp_path)
    result = _result("c1", "a", 2, _evaluated(ctx, 1, 2.0)).model_copy(
        update={missing: False if missing == "passed" else None}
    )
    out = prune(SearchState(world_model=_tree("a"), cycle_results=[result]), _runtime(ctx)[0])
    assert out["world_model"].nodes["a"].status == NodeStatus.FAILED and out["best"] is None
    assert out["rounds_used"] == 2


def test_a_slower_pass_is_attached_but_does_not_replace_the_best(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)  # no compare: the single-measurement rule
    best_ids = _evaluated(ctx, 1, 5.0)
    best = BestRef(candidate_id=best_ids[0], evaluation_id=best_ids[1], node_id="a", score=5.0, latency_ms=0.2)
    slower = _evaluated(ctx, 2, 4.0)
    runtime, events = _runtime(ctx)
    out = prune(
        SearchState(world_model=_tree("a", "b"), best=best, cycle_results=[_result("c1", "b", 1, slower)]), runtime
    )
    assert out["best"] == best and not events.of("new_best")
    assert out["world_model"].nodes["b"].solution.candidate_id == slower[0]
    assert ctx.store.get_run("r")["best_candidate_id"] == best_ids[0]
    (result,) = out["evidence"]
    assert result.promotion == f"not promoted ({events.of('promotion')[0]['reason']})"


# ---- budgets --------------------------------------------------------------------------------------------------------


def test_the_round_budget_is_spent_at_exactly_max_rounds(tmp_path: Path) -> None:
    llm = FakeLLM()
    ctx = _ctx(tmp_path, max_rounds=6, llm=llm)
    assert budget_exhausted(ctx, 5) is None and llm.asked == 1
    assert budget_exhausted(ctx, 6) == "round budget spent (6/6)"
    assert budget_exhausted(ctx, 7) == "round budget spent (7/6)"
    llm.reason = "total tokens used (100) reached the budget of 100"
    assert budget_exhausted(ctx, 5) == "LLM budget spent: total tokens used (100) reached the budget of 100"
    assert budget_exhausted(ctx, 6).startswith("round budget")  # the rounds are checked first


def test_prune_ends_the_run_when_a_budget_is_spent(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, max_rounds=3)
    runtime, events = _runtime(ctx)
    out = prune(
        SearchState(world_model=_tree("a"), rounds_used=1, cycle_results=[_result("c1", "a", 2, None)]), runtime
    )
    assert out["done_reason"] == "round budget spent (3/3)"
    assert events.of("pruned") == [{"event": "pruned", "rounds_used": 3, "done_reason": "round budget spent (3/3)"}]
    assert route_after_prune(SearchState(done_reason=out["done_reason"])) == "__end__"
    assert route_after_prune(SearchState()) == "plan"


# ---- the paired comparison and the confirmations --------------------------------------------------------------------


class FakeComparison(SimpleNamespace):
    def model_dump(self, mode: str = "python") -> dict:
        return dict(vars(self))


def test_compare_receives_the_incumbent_first_and_the_challenger_second(tmp_path: Path) -> None:
    """Swapping the two would promote a kernel the comparison found slower: the recorded order is the contract."""
    calls = []

    def compare(incumbent, challenger, *, rounds):
        calls.append((incumbent.candidate.code, challenger.candidate.code, incumbent.device, challenger.device, rounds))
        return FakeComparison(speedup=1.2, ci_low=1.1, ci_high=1.3, improved=True, per_config=[])

    ctx = _ctx(tmp_path, compare=compare)
    incumbent, challenger = _candidate(ctx, 1), _candidate(ctx, 2)
    best = BestRef(candidate_id=incumbent, evaluation_id="e", node_id="a", score=1.0)
    decision = prune_node.promotion_decision(ctx, best, challenger, 2.0)
    assert decision.promote and (decision.speedup, decision.ci_low, decision.ci_high) == (1.2, 1.1, 1.3)
    assert calls == [(_code(1), _code(2), "cuda", "cuda", 4)]
    assert find_comparison(ctx.store, incumbent, challenger, "k")["speedup"] == 1.2
    assert find_comparison(ctx.store, challenger, incumbent, "k") is None  # stored under (incumbent, challenger)
    assert find_comparison(ctx.store, incumbent, challenger, "other key") is None


def test_a_comparison_stored_for_the_pair_decides_without_measuring(tmp_path: Path) -> None:
    from ksearch.store import ensure_comparison

    ctx = _ctx(tmp_path, compare=lambda *a, **k: pytest.fail("measured again"))
    incumbent, challenger = _candidate(ctx, 1), _candidate(ctx, 2)
    ensure_comparison(
        ctx.store, incumbent, challenger, "k", {"speedup": 0.9, "ci_low": 0.8, "ci_high": 0.95, "improved": False}
    )
    best = BestRef(candidate_id=incumbent, evaluation_id="e", node_id="a", score=1.0)
    decision = prune_node.promotion_decision(ctx, best, challenger, 2.0)
    assert not decision.promote and decision.speedup == 0.9 and "not significant" in decision.reason


def _failing_compare(incumbent, challenger, *, rounds):
    raise RuntimeError("device lost")


@pytest.mark.parametrize(
    ("compare", "reason"),
    [
        (lambda i, c, *, rounds: None, "paired comparison failed: nothing was measured"),
        (_failing_compare, "paired comparison failed: device lost"),
    ],
)
def test_a_comparison_that_fails_or_measures_nothing_keeps_the_incumbent(tmp_path: Path, compare, reason: str) -> None:
    """A faster single measurement is not enough: without a paired comparison the incumbent stays, and nothing is
    stored for the pair (a re-run measures again)."""
    ctx = _ctx(tmp_path, compare=compare)
    incumbent, challenger = _candidate(ctx, 1), _candidate(ctx, 2)
    best = BestRef(candidate_id=incumbent, evaluation_id="e", node_id="a", score=1.0)
    decision = prune_node.promotion_decision(ctx, best, challenger, 2.0)
    assert (decision.promote, decision.reason, decision.speedup) == (False, reason, None)
    assert find_comparison(ctx.store, incumbent, challenger, "k") is None


def _evaluation(verdict: str, latency_ms: float | None) -> Evaluation:
    return Evaluation(
        verdict=Verdict(verdict),
        device="cuda",
        latency_ms=latency_ms,
        score=None if latency_ms is None else 1 / latency_ms,
        timed=latency_ms is not None,
    )


def test_both_kernels_are_confirmed_and_each_confirmation_is_stored_under_its_own_candidate(tmp_path: Path) -> None:
    asked = []
    latency = {_code(1): 1.0, _code(2): 0.9}

    def evaluate(request):
        asked.append((request.candidate.code, request.timing_method))
        return _evaluation("passed", latency[request.candidate.code])

    ctx = _ctx(
        tmp_path,
        evaluate=evaluate,
        confirm=True,
        compare=lambda i, c, *, rounds: FakeComparison(speedup=1.1, ci_low=1.05, ci_high=1.2, improved=True),
    )
    incumbent, challenger = _candidate(ctx, 1), _candidate(ctx, 2)
    best = BestRef(candidate_id=incumbent, evaluation_id="e", node_id="a", score=1.0)
    decision = prune_node.promotion_decision(ctx, best, challenger, 2.0)
    assert decision.promote and decision.confirmed_latency_ms == 0.9
    assert asked == [(_code(2), "confirm"), (_code(1), "confirm")]  # the challenger first, then the incumbent
    assert confirm_key("k") == "k|confirm"
    assert ctx.store.find_evaluation(challenger, "k|confirm")[1].latency_ms == 0.9
    assert ctx.store.find_evaluation(incumbent, "k|confirm")[1].latency_ms == 1.0
    assert ctx.store.find_evaluation(challenger, "k") is None  # never under the plain evaluation key


def test_an_untimed_incumbent_is_not_confirmed_and_a_failed_incumbent_confirmation_sets_no_bar(tmp_path: Path) -> None:
    asked = []
    latency = {_code(1): ("incorrect", None), _code(2): ("passed", 5.0)}

    def evaluate(request):
        asked.append(request.candidate.code)
        return _evaluation(*latency[request.candidate.code])

    ctx = _ctx(
        tmp_path,
        evaluate=evaluate,
        confirm=True,
        compare=lambda i, c, *, rounds: FakeComparison(speedup=1.1, ci_low=1.05, ci_high=1.2, improved=True),
    )
    incumbent, challenger = _candidate(ctx, 1), _candidate(ctx, 2)
    untimed = BestRef(candidate_id=incumbent, evaluation_id="e", node_id="a", score=None)
    assert prune_node.promotion_decision(ctx, untimed, challenger, 2.0).promote
    assert asked == [_code(2)]
    timed = BestRef(candidate_id=incumbent, evaluation_id="e", node_id="a", score=1.0)
    decision = prune_node.promotion_decision(ctx, timed, challenger, 2.0)  # incumbent 'incorrect': no time to beat
    assert decision.promote and asked == [_code(2), _code(1)]


def test_no_confirmation_when_the_rule_already_refuses_or_the_pass_is_untimed(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, evaluate=lambda request: pytest.fail("confirmed"), confirm=True)
    incumbent, challenger = _candidate(ctx, 1), _candidate(ctx, 2)
    best = BestRef(candidate_id=incumbent, evaluation_id="e", node_id="a", score=2.0)
    assert not prune_node.promotion_decision(ctx, best, challenger, 1.0).promote  # slower single measurement
    assert not prune_node.promotion_decision(ctx, best, challenger, None).promote  # untimed


def test_without_confirm_bests_nothing_is_confirmed(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, evaluate=lambda request: pytest.fail("confirmed"))
    decision = prune_node.promotion_decision(ctx, None, _candidate(ctx, 2), 2.0)
    assert decision.promote and decision.confirmed_latency_ms is None


# ---- a person's approval --------------------------------------------------------------------------------------------


def _decision() -> Decision:
    return Decision(promote=True, reason="first passing candidate")


def _approval_case(tmp_path: Path):
    ctx = _ctx(tmp_path)
    challenger = _candidate(ctx, 2)
    state = SearchState(world_model=_tree("a"), step=4, rounds_used=9, approval_required=True)
    evaluation = _evaluation("passed", 0.5)
    return ctx, state, challenger, evaluation


def test_an_approval_already_given_promotes_and_names_its_author(tmp_path: Path) -> None:
    ctx, state, challenger, evaluation = _approval_case(tmp_path)
    add_act(ctx.store, "r", "approve", {"candidate_id": challenger}, "alice", status=APPLIED, applied_step=4)
    decision = approved_decision(ctx, state, state.world_model, None, "a", challenger, evaluation, _decision())
    assert decision.promote and decision.reason == "first passing candidate; approved by alice"


def test_a_rejection_keeps_the_incumbent_and_says_why(tmp_path: Path) -> None:
    ctx, state, challenger, evaluation = _approval_case(tmp_path)
    add_act(ctx.store, "r", "reject", {"candidate_id": challenger}, "bob", status=APPLIED, applied_step=4)
    decision = approved_decision(ctx, state, state.world_model, None, "a", challenger, evaluation, _decision())
    assert not decision.promote and decision.reason == "rejected by bob (first passing candidate)"


def test_an_answer_for_another_step_or_candidate_is_not_taken(tmp_path: Path, monkeypatch) -> None:
    ctx, state, challenger, evaluation = _approval_case(tmp_path)
    add_act(ctx.store, "r", "approve", {"candidate_id": challenger}, "alice", status=APPLIED, applied_step=3)
    add_act(ctx.store, "r", "approve", {"candidate_id": "other"}, "alice", status=APPLIED, applied_step=4)
    prompts = []
    monkeypatch.setattr(prune_node, "ask", lambda prompt: prompts.append(prompt) or "reject")
    decision = approved_decision(ctx, state, state.world_model, None, "a", challenger, evaluation, _decision())
    assert len(prompts) == 1 and not decision.promote


def test_a_copied_pending_approval_is_settled_at_this_step_and_round(tmp_path: Path) -> None:
    ctx, state, challenger, evaluation = _approval_case(tmp_path)
    add_act(ctx.store, "r", "approve", {"candidate_id": challenger}, "alice", status=PENDING, at_step=4)
    decision = approved_decision(ctx, state, state.world_model, None, "a", challenger, evaluation, _decision())
    assert decision.promote
    (act,) = list_acts(ctx.store, "r")
    assert (act["status"], act["result"], act["applied_step"], act["applied_round"]) == (APPLIED, "approved", 4, 9)


@pytest.mark.parametrize(("answer", "promote"), [("approve", True), ("reject", False)])
def test_without_an_answer_the_person_is_asked_and_the_answer_recorded(
    tmp_path: Path, monkeypatch, answer, promote
) -> None:
    ctx, state, challenger, evaluation = _approval_case(tmp_path)
    incumbent = BestRef(candidate_id="c-old", evaluation_id="e-old", node_id="root", score=1.5)
    prompts = []
    monkeypatch.setattr(prune_node, "ask", lambda prompt: prompts.append(prompt) or answer)
    decision = approved_decision(ctx, state, state.world_model, incumbent, "a", challenger, evaluation, _decision())
    assert decision.promote is promote
    (prompt,) = prompts
    assert prompt.kind == "approval" and prompt.key == f"approve:4:{challenger}" and prompt.role == "person"
    assert f"Node a: do a\nCandidate {challenger}: {evaluation.summary()}" in prompt.prompt
    assert "Current best: node root, candidate c-old (1.5)" in prompt.prompt
    assert "Why it would be promoted: first passing candidate" in prompt.prompt
    assert prompt.details == {
        "step": 4,
        "node_id": "a",
        "candidate_id": challenger,
        "reason": "first passing candidate",
    }
    (act,) = list_acts(ctx.store, "r")
    assert act["act"] == answer and act["author"] == "resume" and act["status"] == APPLIED
    assert act["args"] == {"candidate_id": challenger, "node_id": "a", "step": 4}
    assert (act["applied_step"], act["applied_round"], act["result"]) == (4, 9, f"{answer}d")


def test_the_prompt_says_when_there_is_no_best_yet(tmp_path: Path, monkeypatch) -> None:
    ctx, state, challenger, evaluation = _approval_case(tmp_path)
    prompts = []
    monkeypatch.setattr(prune_node, "ask", lambda prompt: prompts.append(prompt) or "approve")
    approved_decision(ctx, state, state.world_model, None, "a", challenger, evaluation, _decision())
    assert "Current best: none yet" in prompts[0].prompt


def test_prune_asks_only_for_a_promotion_and_only_when_approval_is_required(tmp_path: Path, monkeypatch) -> None:
    ctx = _ctx(tmp_path)
    asked = []
    monkeypatch.setattr(prune_node, "ask", lambda prompt: asked.append(prompt.key) or "reject")
    ids = _evaluated(ctx, 1, 2.0)
    required = SearchState(
        world_model=_tree("a"), step=2, approval_required=True, cycle_results=[_result("c1", "a", 1, ids)]
    )
    out = prune(required, _runtime(ctx)[0])
    assert asked == [f"approve:2:{ids[0]}"] and out["best"] is None
    other = _ctx(tmp_path / "b")
    free = SearchState(world_model=_tree("a"), step=2, cycle_results=[_result("c1", "a", 1, _evaluated(other, 1, 2.0))])
    assert prune(free, _runtime(other)[0])["best"] is not None and len(asked) == 1
    slower = SearchState(
        world_model=_tree("a"),
        step=5,
        approval_required=True,
        cycle_results=[_result("c1", "a", 1, ids)],
        best=BestRef(candidate_id="c0", evaluation_id="e0", node_id="root", score=9.0),
    )
    prune(slower, _runtime(ctx)[0])
    assert len(asked) == 1  # not promoted by the rule: nobody is asked


def test_an_answer_given_while_the_run_was_paused_is_taken_as_it_is(tmp_path: Path, monkeypatch) -> None:
    """``ksearch steer RUN approve`` writes the act while the run waits in ``ask``: prune finds it, adds no act."""
    ctx, state, challenger, evaluation = _approval_case(tmp_path)

    def steer_while_paused(prompt):
        add_act(
            ctx.store,
            "r",
            "approve",
            {"candidate_id": challenger, "node_id": "a", "step": 4},
            "alice",
            status=APPLIED,
            applied_step=4,
        )
        return "reject"  # a stale resume value: the stored act wins

    monkeypatch.setattr(prune_node, "ask", steer_while_paused)
    decision = approved_decision(ctx, state, state.world_model, None, "a", challenger, evaluation, _decision())
    assert decision.promote and decision.reason.endswith("approved by alice")
    assert [(a["act"], a["author"]) for a in list_acts(ctx.store, "r")] == [("approve", "alice")]


def test_an_untimed_first_pass_is_not_confirmed(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, evaluate=lambda request: pytest.fail("confirmed"), confirm=True)
    decision = prune_node.promotion_decision(ctx, None, _candidate(ctx, 2), None)
    assert decision.promote and decision.confirmed_latency_ms is None


def test_an_incumbent_whose_confirmation_failed_sets_no_time_to_beat_even_with_a_latency(tmp_path: Path) -> None:
    times = {
        _code(1): Evaluation(verdict=Verdict.INCORRECT, device="cuda", latency_ms=0.5),
        _code(2): _evaluation("passed", 0.9),
    }
    ctx = _ctx(
        tmp_path,
        evaluate=lambda request: times[request.candidate.code],
        confirm=True,
        compare=lambda i, c, *, rounds: FakeComparison(speedup=1.1, ci_low=1.05, ci_high=1.2, improved=True),
    )
    incumbent, challenger = _candidate(ctx, 1), _candidate(ctx, 2)
    best = BestRef(candidate_id=incumbent, evaluation_id="e", node_id="a", score=1.0)
    assert prune_node.promotion_decision(ctx, best, challenger, 2.0).promote  # 0.9 ms is not held against 0.5


def test_nothing_is_measured_when_the_rule_needs_no_comparison(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, compare=lambda *a, **k: pytest.fail("measured"))
    incumbent, challenger = _candidate(ctx, 1), _candidate(ctx, 2)
    timed = BestRef(candidate_id=incumbent, evaluation_id="e", node_id="a", score=2.0)
    slower = prune_node.promotion_decision(ctx, timed, challenger, 1.0)
    assert not slower.promote and slower.reason.startswith("single measurement not better")
    untimed = BestRef(candidate_id=incumbent, evaluation_id="e", node_id="a", score=None)
    first_timed = prune_node.promotion_decision(ctx, untimed, challenger, 1.0)
    assert first_timed.promote and first_timed.reason == "first timed pass displaces an untimed incumbent"
    assert find_comparison(ctx.store, incumbent, challenger, "k") is None


def test_a_child_within_its_parents_measured_spread_is_no_regression(tmp_path: Path) -> None:
    """Issue 57: with the parent's evaluation at hand (its per-shape spread), a 5 % slower child inside two standard
    errors is within noise; by the scores alone (the 2 % floor) it would be a regression."""
    from ksearch.contracts.evaluation import Timing

    ctx = _ctx(tmp_path)

    def noisy(n: int, ms: float) -> tuple[str, str]:
        timing = Timing(config="b0", median_ms=ms, mean_ms=ms, stdev_ms=0.5, samples=4)
        evaluation = Evaluation(
            verdict=Verdict.PASSED, device="cuda", timed=True, latency_ms=ms, score=1 / ms, timings=[timing]
        )
        candidate = _candidate(ctx, n)
        return candidate, ctx.store.record_evaluation(candidate, "k", evaluation)

    parent, child = noisy(1, 1.0), noisy(2, 1.05)
    result = _result("c1", "a", 1, child, base=1.0).model_copy(update={"base_candidate_id": parent[0]})
    state = SearchState(world_model=_tree("a"), cycle_results=[result])
    solution = prune(state, _runtime(ctx)[0])["world_model"].nodes["a"].solution
    assert solution is not None and solution.regression_vs_parent is False and solution.vs_parent_within_noise
    assert solution.vs_parent == round(1 / 1.05, 4)
    unknown = result.model_copy(update={"base_candidate_id": _candidate(ctx, 3)})  # no evaluation of it here
    solution = (
        prune(SearchState(world_model=_tree("a"), cycle_results=[unknown]), _runtime(ctx)[0])["world_model"]
        .nodes["a"]
        .solution
    )
    assert solution is not None and solution.regression_vs_parent is True  # the scores alone: 4.8 % beyond 2 %
