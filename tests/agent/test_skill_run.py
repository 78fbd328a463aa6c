"""Skills through whole searches (the real graph, store, replay model and prompts).

Run 1 lifts a skill from a significantly faster edge; run 2 sees it in its planner prompt, binds it (after one
rejected binding), the coder gets its recipe, and the cycle's paired speedup on other code admits it; a replay of
run 2 still sees the frozen library of run 2's start. Nothing is timed on the CPU, so the timed evaluations and
paired comparisons of these kernels are written into the store first, as a GPU run would have recorded them: the
profile node finds them by (candidate, evaluation key) and never starts the evaluator.
"""

from __future__ import annotations

import json

from ksearch.agent.config import RunConfig
from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation, Timing, Verdict
from ksearch.flows import run as runner
from ksearch.llm.parsing import extract_code
from ksearch.skills.evidence import EvidenceKind, SkillStatus
from ksearch.skills.library import library_views, load_evidence, load_snapshot
from ksearch.skills.records import SkillSource
from ksearch.store import Store, ensure_comparison
from ksearch.tools.fingerprint import probe_device
from tests.helpers.scripts import fenced, followup_plan, init_plan, row_kernel, write_script
from tests.helpers.skill_scripts import ONLINE_DRAFT, ONLINE_ONE_ROW, WHOLE_ROW

B_ONLINE = ONLINE_ONE_ROW + "# written for node b1\n"


def candidate_id(code: str) -> str:
    """The id the run will give this code once the coder's reply is parsed."""
    return Candidate(task="softmax", language="triton", code=extract_code(fenced(code), "triton")).id


def seed_store(ws, latencies: dict[str, float], comparisons: list[tuple[str, str, float, float, float]]) -> None:
    store = Store(ws / "ksearch.db")
    key = probe_device("cpu").eval_key("softmax")
    try:
        for code, ms in latencies.items():
            cid = store.ensure_candidate(
                Candidate(task="softmax", language="triton", code=extract_code(fenced(code), "triton"))
            )
            timing = Timing(config="bench_32x256", median_ms=ms, mean_ms=ms, stdev_ms=0.01, samples=100)
            store.record_evaluation(
                cid,
                key,
                Evaluation(
                    verdict=Verdict.PASSED,
                    device="cpu",
                    timed=True,
                    score=1 / ms,
                    latency_ms=ms,
                    timings=[timing],
                    configs_passed=8,
                    configs_total=8,
                ),
            )
        for base, child, speedup, low, high in comparisons:
            ensure_comparison(
                store,
                candidate_id(base),
                candidate_id(child),
                key,
                {"speedup": speedup, "ci_low": low, "ci_high": high, "improved": low > 1, "rounds": 5},
            )
    finally:
        store.close()


def config(script, run_id: str) -> RunConfig:
    return RunConfig(
        run_id=run_id,
        task="softmax",
        model=f"replay:{script}",
        device="cpu",
        max_rounds=2,
        max_attempts_per_cycle=1,
        stagnation_window=1,
    )


def bind(parent: str, child: str, skill_id: str) -> str:
    return json.dumps(
        {
            "ops": [
                {
                    "op": "insert",
                    "parent_id": parent,
                    "node": {
                        "id": child,
                        "action": {
                            "title": "Stream each row online",
                            "difficulty": 2,
                            "score": 0.8,
                            "skill_id": skill_id,
                        },
                    },
                }
            ]
        }
    )


def test_a_skill_lifted_by_one_search_is_applied_and_admitted_by_another(tmp_path):
    ws = tmp_path / "ws"
    b_code = row_kernel(7)
    seed_store(
        ws,
        {WHOLE_ROW: 2.0, ONLINE_ONE_ROW: 1.0, b_code: 2.0, B_ONLINE: 1.25},
        [(WHOLE_ROW, ONLINE_ONE_ROW, 2.0, 1.8, 2.2), (b_code, B_ONLINE, 1.6, 1.5, 1.7)],
    )

    # run 1: a -> a1 is twice as fast (paired): the edge is lifted into a candidate skill
    run1 = write_script(
        tmp_path / "run1.jsonl",
        [
            ("plan:0:0", init_plan([("a", 0.9)])),
            ("write:c1:1", fenced(WHOLE_ROW)),
            ("plan:1:0", followup_plan("a", "a1")),
            ("write:c2:1", fenced(ONLINE_ONE_ROW)),
            ("lift:c2", json.dumps(ONLINE_DRAFT)),
        ],
    )
    outcome = runner.start_run(config(run1, "r1"), workspace=ws)
    assert outcome.status == "finished" and outcome.best is not None and outcome.best.node_id == "a1"
    store = runner.open_store(ws)
    try:
        [lifted] = library_views(store)
        skill_id = lifted.skill_id
        assert lifted.skill.source == SkillSource.SEARCH and lifted.status == SkillStatus.CANDIDATE
        assert lifted.skill.scope.archs == ["cpu"] and lifted.estimate.source_speedup == 2.0
        run1_cfg = store.get_run("r1")["config"]
        assert run1_cfg["skill_snapshot"] and load_snapshot(store, run1_cfg["skill_snapshot"]) == []  # frozen before
    finally:
        store.close()

    # run 2: the planner sees the skill, binds it (the first binding names an unknown skill and is sent back)
    run2 = write_script(
        tmp_path / "run2.jsonl",
        [
            ("plan:0:0", init_plan([("b", 0.9)])),
            ("write:c1:1", fenced(b_code)),
            ("plan:1:0", bind("b", "b1", "sk-000000000000")),
            ("plan:1:1", bind("b", "b1", skill_id)),
            ("write:c2:1", fenced(B_ONLINE)),
        ],
    )
    outcome = runner.start_run(config(run2, "r2"), workspace=ws)
    assert outcome.status == "finished" and outcome.world_model.nodes["b1"].action.skill_id == skill_id
    store = runner.open_store(ws)
    try:
        prompts = {c["call_key"]: c["prompt"] for c in store.list_llm_calls("r2")}
        assert skill_id in prompts["plan:0:0"] and "candidate, unverified" in prompts["plan:0:0"]
        assert "is not in this run's skill library" in prompts["plan:1:1"]
        assert (
            f"Skill {skill_id} (online_softmax" in prompts["write:c2:1"] and "Recipe: Replace" in prompts["write:c2:1"]
        )
        view = next(v for v in library_views(store) if v.skill_id == skill_id)
        assert view.status == SkillStatus.ADMITTED
        [trial] = [e for e in load_evidence(store, skill_id) if e.kind == EvidenceKind.TRIAL]
        assert (trial.run_id, trial.node_id, trial.speedup, trial.held_out, trial.verified) == (
            "r2",
            "b1",
            1.6,
            True,
            True,
        )
        snapshot = store.get_run("r2")["config"]["skill_snapshot"]
        [frozen] = load_snapshot(store, snapshot)
        assert frozen.skill_id == skill_id and frozen.status == SkillStatus.CANDIDATE  # as it was at r2's start
    finally:
        store.close()

    # a replay of run 2 works from run 2's snapshot, not from the library that has learned since
    replay_cfg = runner.replay_config("r2", workspace=ws)
    assert replay_cfg.skill_snapshot == snapshot
    outcome = runner.start_run(replay_cfg, workspace=ws)
    assert outcome.status == "finished"
    store = runner.open_store(ws)
    try:
        replayed = {c["call_key"]: c["prompt"] for c in store.list_llm_calls(replay_cfg.run_id)}
        assert replayed["plan:0:0"] == prompts["plan:0:0"]  # same skills, same frozen numbers
        view = next(v for v in library_views(store) if v.skill_id == skill_id)
        assert view.estimate.paired_trials == 1  # the replay re-measured the same pair: counted once
    finally:
        store.close()
