"""Learning skills from a search: lifting with scripted lifter replies, trials and admission, on a real store.

Nothing is timed on the CPU, so the timed evaluations and paired comparisons these rules read are written into the
store first (as a GPU run's profile and prune would have written them) or come from a scripted compare function;
the components under test (lifting, trial recording, admission, the store) are the real ones.
"""

from __future__ import annotations

import json

import pytest

from ksearch.agent.config import RunConfig
from ksearch.agent.context import SearchContext
from ksearch.agent.skill_use import edge_comparison, learn_from_cycles, trial_line
from ksearch.agent.state import CycleResult
from ksearch.agent.world_model import Action, Node, SolutionRef, WorldModel
from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Comparison, Evaluation, Timing, Verdict
from ksearch.llm.client import LLMClient
from ksearch.llm.recorder import StoreRecorder
from ksearch.llm.replay import ReplayEntry, ScriptedChatModel
from ksearch.skills.evidence import Evidence, EvidenceKind, SkillStatus, summarize
from ksearch.skills.library import library_views, load_evidence, record_evidence, save_skill, skill_view
from ksearch.skills.lifting import LiftInput, lift_skill
from ksearch.skills.records import Scope, SkillContext, SkillDraft, SkillSource, make_skill
from ksearch.store import Store, ensure_comparison
from ksearch.tasks.registry import resolve_task
from ksearch.tools.evaluator import evaluate
from tests.helpers.skill_scripts import ONLINE_DRAFT, ONLINE_ONE_ROW, WHOLE_ROW

CPU = SkillContext(family="softmax", language="triton", arch="cpu")
KEY = "softmax|test-key"


def make_context(tmp_path, replies: list[tuple[str, str]] = (), **config) -> tuple[SearchContext, ScriptedChatModel]:
    store = Store(tmp_path / "ws" / "ksearch.db")
    cfg = RunConfig(
        run_id="r1", task="softmax", model="replay:x", device="cpu", skill_snapshot="skills-sha256:t", **config
    )
    store.create_run(
        {
            "id": "r1",
            "task": "softmax",
            "model": "replay:x",
            "language": "triton",
            "device": "cpu",
            "config": cfg.model_dump(mode="json"),
        }
    )
    model = ScriptedChatModel(entries=[ReplayEntry(call_key=k, reply=r) for k, r in replies])
    ctx = SearchContext(
        config=cfg,
        store=store,
        task=resolve_task("softmax"),
        llm=LLMClient(model, StoreRecorder(store, "r1"), model_name="scripted"),
        evaluate=evaluate,
        eval_key=KEY,
        device_description="test",
        skill_context=CPU,
    )
    return ctx, model


def stored(store: Store, code: str, latency_ms: float | None, verdict: Verdict = Verdict.PASSED) -> tuple[str, str]:
    """A candidate and its evaluation as a GPU profile would have recorded them (timed when a latency is given)."""
    cid = store.ensure_candidate(Candidate(task="softmax", language="triton", code=code))
    if verdict != Verdict.PASSED:
        evaluation = Evaluation(verdict=verdict, device="cpu", log="large_6x257: 283 non-finite output values")
    elif latency_ms is None:
        evaluation = Evaluation(verdict=verdict, device="cpu", configs_passed=8, configs_total=8)
    else:
        timing = Timing(config="bench", median_ms=latency_ms, mean_ms=latency_ms, stdev_ms=0.01, samples=50)
        evaluation = Evaluation(
            verdict=verdict,
            device="cpu",
            timed=True,
            score=1 / latency_ms,
            latency_ms=latency_ms,
            timings=[timing],
            configs_passed=8,
            configs_total=8,
        )
    return cid, store.record_evaluation(cid, KEY, evaluation)


def compared(store: Store, base: str, child: str, speedup: float, low: float, high: float) -> None:
    ensure_comparison(
        store,
        base,
        child,
        KEY,
        {"speedup": speedup, "ci_low": low, "ci_high": high, "improved": low > 1.0, "rounds": 5, "device": "scripted"},
    )


def tree(base_id: str, base_eval: str, child_action: Action) -> WorldModel:
    wm = WorldModel()
    parent = Node(
        id="a",
        parent_id="root",
        action=Action(title="whole row"),
        solution=SolutionRef(candidate_id=base_id, evaluation_id=base_eval, verdict="passed"),
    )
    child = Node(id="a1", parent_id="a", action=child_action)
    return wm.model_copy(update={"nodes": {**wm.nodes, "a": parent, "a1": child}})


def result(base: str | None, child: str | None, child_eval: str | None, *, passed=True, base_score=0.5) -> CycleResult:
    return CycleResult(
        cycle_id="c2",
        node_id="a1",
        rounds=1,
        passed=passed,
        stop_reason="attempt budget",
        base_score=base_score,
        base_candidate_id=base,
        best_candidate_id=child if passed else None,
        best_evaluation_id=child_eval if passed else None,
        last_candidate_id=child,
        last_evaluation_id=child_eval,
    )


def collect() -> tuple[list[tuple[str, dict]], callable]:
    events: list[tuple[str, dict]] = []
    return events, lambda name, data: events.append((name, data))


# ---- the lifter ------------------------------------------------------------------------------------------------------


def test_the_lifter_is_sent_back_when_its_features_do_not_match_the_code(tmp_path):
    wrong = {**ONLINE_DRAFT, "provides": [{"locus": "softmax.row_loop", "name": "online", "detect": ["tl.exp(x)"]}]}
    ctx, model = make_context(tmp_path, [("lift:t", json.dumps(wrong)), ("lift:t#repair1", json.dumps(ONLINE_DRAFT))])
    item = LiftInput(
        origin="a test edge",
        context=CPU,
        task_spec="softmax",
        change="Action: stream the row",
        before_code=WHOLE_ROW,
        after_code=ONLINE_ONE_ROW,
        measurement="x1.8 [1.6, 2.0]",
    )
    skill = lift_skill(ctx.llm, "lift:t", item, source=SkillSource.SEARCH)
    assert skill.scope == Scope(families=["softmax"], languages=["triton"], archs=["cpu"])  # from the context
    assert skill.source == SkillSource.SEARCH and skill.category == "online_softmax"
    first, repair = model.prompts
    assert "```diff" in first and "+        l = l * tl.exp(m - m_new)" in first and "x1.8 [1.6, 2.0]" in first
    assert "already in the before code" in repair  # tl.exp(x) is in both versions
    calls = ctx.store.list_llm_calls("r1")
    assert [c["role"] for c in calls] == ["skill_lifter", "skill_lifter"] and calls[0]["error"]


# ---- lifting search edges ----------------------------------------------------------------------------------------


def test_a_significantly_faster_edge_is_lifted_once_into_a_candidate_skill(tmp_path):
    ctx, model = make_context(tmp_path, [("lift:c2", json.dumps(ONLINE_DRAFT))])
    base, base_eval = stored(ctx.store, WHOLE_ROW, 2.0)
    child, child_eval = stored(ctx.store, ONLINE_ONE_ROW, 1.0)
    compared(ctx.store, base, child, 2.0, 1.8, 2.2)
    wm = tree(base, base_eval, Action(title="Stream each row online", description="running max and sum"))
    events, emit = collect()
    for _ in range(2):  # a node re-run after a crash records nothing twice and pays for nothing twice
        learn_from_cycles(ctx, wm, [result(base, child, child_eval)], emit)
    [view] = library_views(ctx.store)
    assert view.status == SkillStatus.CANDIDATE and view.skill.source == SkillSource.SEARCH
    assert view.estimate.source_speedup == pytest.approx(2.0) and view.estimate.trials == 0
    [origin] = load_evidence(ctx.store, view.skill_id)
    assert (origin.kind, origin.run_id, origin.cycle_id, origin.node_id) == (EvidenceKind.ORIGIN, "r1", "c2", "a1")
    assert (origin.base_candidate_id, origin.candidate_id, origin.ci_low) == (base, child, 1.8)
    assert len(model.prompts) == 1 and "Stream each row online" in model.prompts[0]
    assert [e for e, _ in events].count("skill_lifted") == 2  # the event repeats; the writes do not


@pytest.mark.parametrize(
    "case", ["not significant", "below the lift threshold", "untimed (CPU)", "no parent code", "slower single score"]
)
def test_edges_that_are_not_clearly_faster_are_not_lifted(tmp_path, case):
    ctx, model = make_context(tmp_path, [("lift:c2", json.dumps(ONLINE_DRAFT))])
    base, base_eval = stored(ctx.store, WHOLE_ROW, 2.0)
    child, child_eval = stored(ctx.store, ONLINE_ONE_ROW, None if case == "untimed (CPU)" else 1.9)
    low = {"not significant": 0.97, "below the lift threshold": 1.01}.get(case, 1.5)
    compared(ctx.store, base, child, 1.05, low, 1.2)
    r = result(
        None if case == "no parent code" else base,
        child,
        child_eval,
        base_score=0.9 if case == "slower single score" else 0.5,
    )
    learn_from_cycles(ctx, tree(base, base_eval, Action(title="x")), [r], lambda *_: None)
    assert library_views(ctx.store) == [] and model.prompts == []


def test_lifting_can_be_switched_off(tmp_path):
    ctx, model = make_context(tmp_path, [("lift:c2", json.dumps(ONLINE_DRAFT))], lift_skills=False)
    base, base_eval = stored(ctx.store, WHOLE_ROW, 2.0)
    child, child_eval = stored(ctx.store, ONLINE_ONE_ROW, 1.0)
    compared(ctx.store, base, child, 2.0, 1.8, 2.2)
    learn_from_cycles(ctx, tree(base, base_eval, Action(title="x")), [result(base, child, child_eval)], lambda *_: None)
    assert library_views(ctx.store) == [] and model.prompts == []


# ---- trials: effect updates and admission ------------------------------------------------------------------------


def library_skill(ctx: SearchContext, origin_base: str, origin_child: str):
    """A skill learned elsewhere on (origin_base -> origin_child), in the library and in the run's snapshot."""
    skill = make_skill(
        SkillDraft.model_validate(ONLINE_DRAFT),
        source=SkillSource.EXPERT,
        scope=Scope(families=["softmax"], languages=["triton"], archs=["cpu"]),
    )
    save_skill(ctx.store, skill)
    origin = Evidence(
        kind=EvidenceKind.ORIGIN,
        run_id="learn-1",
        cycle_id="step3",
        task="softmax",
        family="softmax",
        language="triton",
        arch="cpu",
        base_candidate_id=origin_base,
        candidate_id=origin_child,
        verdict="passed",
        timed=True,
        speedup=1.6,
        ci_low=1.5,
        ci_high=1.7,
    )
    record_evidence(ctx.store, skill.skill_id, origin)
    ctx.skills = [summarize(skill, [origin])]
    return skill


def test_a_verified_trial_on_other_code_admits_the_skill_and_updates_its_estimate(tmp_path):
    ctx, _ = make_context(tmp_path)
    learned_base, _ = stored(ctx.store, WHOLE_ROW + "# the expert walk's version\n", 2.0)
    learned_child, _ = stored(ctx.store, ONLINE_ONE_ROW + "# the expert\n", 1.2)
    skill = library_skill(ctx, learned_base, learned_child)
    before = skill_view(ctx.store, skill.skill_id)
    base, base_eval = stored(ctx.store, WHOLE_ROW, 2.0)
    child, child_eval = stored(ctx.store, ONLINE_ONE_ROW, 1.25)
    compared(ctx.store, base, child, 1.6, 1.5, 1.7)
    events, emit = collect()
    learn_from_cycles(
        ctx,
        tree(base, base_eval, Action(title="apply", skill_id=skill.skill_id)),
        [result(base, child, child_eval)],
        emit,
    )
    after = skill_view(ctx.store, skill.skill_id)
    assert before.status == SkillStatus.CANDIDATE and after.status == SkillStatus.ADMITTED
    trial = [e for e in load_evidence(ctx.store, skill.skill_id) if e.kind == EvidenceKind.TRIAL][0]
    assert trial.held_out and trial.verified and (trial.run_id, trial.cycle_id, trial.node_id) == ("r1", "c2", "a1")
    assert after.estimate.trials == 1 and after.estimate.paired_trials == 1
    assert before.estimate.speedup < after.estimate.speedup < 1.6  # pulled from the shrunk prior towards 1.6
    assert (
        "skill_trial",
        {
            "skill_id": skill.skill_id,
            "cycle_id": "c2",
            "verdict": "passed",
            "speedup": 1.6,
            "verified": True,
            "held_out": True,
        },
    ) in events
    assert "verified" in trial_line(ctx, skill.skill_id, "c2") and "x1.600" in trial_line(ctx, skill.skill_id, "c2")
    assert library_views(ctx.store) == [after]  # a trial never lifts a second skill


def test_a_trial_on_the_code_the_skill_came_from_does_not_admit_it(tmp_path):
    ctx, _ = make_context(tmp_path)
    base, base_eval = stored(ctx.store, WHOLE_ROW, 2.0)
    child, child_eval = stored(ctx.store, ONLINE_ONE_ROW, 1.25)
    skill = library_skill(ctx, base, child)  # learned on exactly this edge
    compared(ctx.store, base, child, 1.6, 1.5, 1.7)
    learn_from_cycles(
        ctx,
        tree(base, base_eval, Action(title="apply", skill_id=skill.skill_id)),
        [result(base, child, child_eval)],
        lambda *_: None,
    )
    trial = [e for e in load_evidence(ctx.store, skill.skill_id) if e.kind == EvidenceKind.TRIAL][0]
    assert trial.verified and not trial.held_out
    assert skill_view(ctx.store, skill.skill_id).status == SkillStatus.CANDIDATE


def test_failed_and_untimed_trials_are_recorded_without_a_measurement(tmp_path):
    ctx, _ = make_context(tmp_path)
    skill = library_skill(ctx, "sha256-v1:elsewhere-a", "sha256-v1:elsewhere-b")
    base, base_eval = stored(ctx.store, WHOLE_ROW, None)
    wrong, wrong_eval = stored(ctx.store, ONLINE_ONE_ROW.replace("m_new)", "m)"), None, Verdict.INCORRECT)
    learn_from_cycles(
        ctx,
        tree(base, base_eval, Action(title="apply", skill_id=skill.skill_id)),
        [result(base, wrong, wrong_eval, passed=False)],
        lambda *_: None,
    )
    view = skill_view(ctx.store, skill.skill_id)
    assert view.status == SkillStatus.CANDIDATE and view.estimate.trials == 1 and view.estimate.trials_passed == 0
    assert any("observed incorrect" in r and "non-finite" in r for r in view.risks)
    trial = [e for e in load_evidence(ctx.store, skill.skill_id) if e.kind == EvidenceKind.TRIAL][0]
    assert trial.verdict == "incorrect" and trial.speedup is None and trial.candidate_id == wrong


def test_a_missing_paired_comparison_is_measured_once_with_the_compare_function(tmp_path):
    ctx, _ = make_context(tmp_path)
    base, _ = stored(ctx.store, WHOLE_ROW, 2.0)
    child, _ = stored(ctx.store, ONLINE_ONE_ROW, 1.0)
    asked = []

    def scripted_compare(incumbent, challenger, *, rounds):
        asked.append((incumbent.candidate.code, challenger.candidate.code, rounds))
        return Comparison(per_config=[], speedup=1.9, ci_low=1.7, ci_high=2.1, improved=True, rounds=rounds)

    ctx.compare = scripted_compare
    first = edge_comparison(ctx, base, child)
    again = edge_comparison(ctx, base, child)
    assert first == again and first["speedup"] == 1.9 and first["improved"] is True
    assert asked == [(WHOLE_ROW, ONLINE_ONE_ROW, ctx.config.promotion_rounds)]

    def broken_compare(*_args, **_kwargs):
        raise RuntimeError("the GPU fell off the bus")

    ctx.compare = broken_compare
    other, _ = stored(ctx.store, ONLINE_ONE_ROW + "# variant\n", 1.1)
    assert edge_comparison(ctx, base, other) is None  # a failed measurement costs the skill a number, not the run
