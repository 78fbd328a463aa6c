"""Skills end to end on the CPU with the real evaluator: ``ksearch skills learn`` walks the expert softmax of
``examples/softmax_expert.py`` backward with scripted simplifier and lifter replies, a re-run of the same session
repeats nothing, and a search then applies a learned skill (correctness only on the CPU: it stays a candidate)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ksearch.agent.config import RunConfig
from ksearch.cli import app
from ksearch.flows import run as runner
from ksearch.skills.evidence import EvidenceKind, SkillStatus
from ksearch.skills.library import library_views, load_evidence
from ksearch.skills.records import SkillSource
from tests.helpers.scripts import fenced, init_plan, row_kernel, write_script
from tests.helpers.skill_scripts import EXPERT_FILE, ONLINE_ONE_ROW, learn_script

pytestmark = pytest.mark.slow


def learn(ws, model: str, session: str):
    result = CliRunner().invoke(
        app,
        [
            "--workspace",
            str(ws),
            "skills",
            "learn",
            str(EXPERT_FILE),
            "--task",
            "softmax",
            "--model",
            model,
            "--device",
            "cpu",
            "--session",
            session,
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_learn_from_an_expert_kernel_then_apply_a_skill_in_a_search(tmp_path):
    ws, script = tmp_path / "ws", learn_script(tmp_path / "learn.jsonl")
    report = learn(ws, f"replay:{script}", "learn-1")

    walk = report["walk"]
    assert walk["termination"] == "complete"
    assert [(s["category"], s["accepted"], s["verdict"]) for s in walk["steps"]] == [
        ("row_batching", True, "passed"),
        ("online_softmax", False, "incorrect"),
        ("online_softmax", True, "passed"),
    ]
    assert "not timed" in walk["steps"][0]["reason"]  # the CPU cannot say whether the removal mattered
    assert report["context"] == {"family": "softmax", "language": "triton", "arch": "cpu"}
    skills = {v["skill"]["category"]: v for v in report["skills"]}
    assert set(skills) == {"online_softmax", "row_batching"}

    store = runner.open_store(ws)
    try:
        calls = {c["call_key"]: c for c in store.list_llm_calls("learn-1")}
        assert list(calls) == ["simplify:1", "simplify:2", "simplify:3", "simplify:4", "lift:3", "lift:1"]
        assert {c["role"] for c in calls.values()} == {"skill_simplifier", "skill_lifter"}
        assert "non-finite" in calls["simplify:3"]["prompt"]  # the rejection is fed back to the simplifier
        assert "non-finite" in calls["lift:3"]["prompt"]  # and becomes failure evidence for the skill's risks
        assert "row_batching at launch" in calls["simplify:2"]["prompt"]
        views = {v.skill.category: v for v in library_views(store)}
        online = views["online_softmax"]
        assert online.skill.source == SkillSource.EXPERT and online.status == SkillStatus.CANDIDATE
        [origin] = load_evidence(store, online.skill_id)
        assert origin.kind == EvidenceKind.ORIGIN and origin.cycle_id == "step3" and not origin.timed
        after, before = (
            store.get_candidate(origin.candidate_id).code,
            store.get_candidate(origin.base_candidate_id).code,
        )
        assert "tl.exp(m - m_new)" in after and "ROWS_PER_PROGRAM" not in after  # forward: whole row -> online
        assert "tl.exp(m - m_new)" not in before
        evaluations = store.db["evaluations"].count
    finally:
        store.close()

    # the same session again: every call and evaluation is found, nothing is paid for or run twice
    again = learn(ws, f"replay:{script}", "learn-1")
    assert [v["skill"]["skill_id"] for v in again["skills"]] == [v["skill"]["skill_id"] for v in report["skills"]]
    # and a new session replaying this one's recorded replies (how a CPU walk is re-timed on a GPU)
    replayed = learn(ws, "replay:learn-1", "learn-2")
    assert [s["accepted"] for s in replayed["walk"]["steps"]] == [True, False, True]
    assert {v["skill"]["skill_id"] for v in replayed["skills"]} == {v["skill"]["skill_id"] for v in report["skills"]}
    store = runner.open_store(ws)
    try:
        assert len(store.list_llm_calls("learn-1")) == 6 and store.db["evaluations"].count == evaluations
        assert all(c["replayed"] for c in store.list_llm_calls("learn-2"))
        assert {e.run_id for e in load_evidence(store, online.skill_id)} == {"learn-1", "learn-2"}
    finally:
        store.close()

    # a search binds the learned online-softmax skill to an action; its cycle is a correctness-only trial
    skill_id = online.skill_id
    online_b = ONLINE_ONE_ROW + "# written by the search\n"
    search = write_script(
        tmp_path / "search.jsonl",
        [
            ("plan:0:0", init_plan([("w", 0.9)])),
            ("write:c1:1", fenced(row_kernel(3))),
            (
                "plan:1:0",
                json.dumps(
                    {
                        "ops": [
                            {
                                "op": "insert",
                                "parent_id": "w",
                                "node": {
                                    "id": "w1",
                                    "action": {
                                        "title": "Online softmax",
                                        "difficulty": 2,
                                        "score": 0.8,
                                        "skill_id": skill_id,
                                    },
                                },
                            }
                        ]
                    }
                ),
            ),
            ("write:c2:1", fenced(online_b)),
        ],
    )
    cfg = RunConfig(
        run_id="s1",
        task="softmax",
        model=f"replay:{search}",
        device="cpu",
        max_rounds=2,
        max_attempts_per_cycle=1,
        stagnation_window=1,
    )
    outcome = runner.start_run(cfg, workspace=ws)
    assert outcome.status == "finished" and outcome.world_model.nodes["w1"].solution is not None
    store = runner.open_store(ws)
    try:
        [trial] = [e for e in load_evidence(store, skill_id) if e.kind == EvidenceKind.TRIAL]
        assert (trial.verdict, trial.timed, trial.speedup, trial.held_out, trial.verified) == (
            "passed",
            False,
            None,
            True,
            False,
        )
        view = next(v for v in library_views(store) if v.skill_id == skill_id)
        assert view.status == SkillStatus.CANDIDATE and view.estimate.trials_passed == 1  # untimed: never admitted
    finally:
        store.close()
