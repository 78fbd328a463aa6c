"""End to end on the CPU: the real graph, store, replay model and sandboxed evaluator under the Triton interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest

from ksearch.agent.config import RunConfig
from ksearch.agent.world_model import NodeStatus
from ksearch.flows import run as runner
from tests.helpers.scripts import two_cycle_script

pytestmark = pytest.mark.slow

EXPECTED_ROUNDS = [
    ("c1", 1, "incorrect"),
    ("c1", 2, "passed"),
    ("c1", 3, "passed"),
    ("c1", 4, "passed"),
    ("c2", 1, "passed"),
    ("c2", 2, "passed"),
]


def config(script: Path, run_id: str = "r1", **overrides) -> RunConfig:
    settings = {"max_rounds": 6, "stagnation_window": 2, **overrides}
    return RunConfig(run_id=run_id, task="softmax", model=f"replay:{script}", device="cpu", **settings)


def rounds_of(store, run_id: str) -> list[tuple[str, int, str]]:
    return [(a["cycle_id"], a["attempt"], a["verdict"]) for a in store.list_attempts(run_id)]


def test_full_run_with_scripted_model(tmp_path):
    script = two_cycle_script(tmp_path / "script.jsonl")
    ws = tmp_path / "ws"
    outcome = runner.start_run(config(script), workspace=ws)

    assert outcome.status == "finished"
    assert outcome.rounds_used == 6
    assert outcome.done_reason.startswith("round budget spent")
    wm = outcome.world_model
    assert wm.nodes["a"].status == NodeStatus.SOLVED
    assert wm.nodes["a1"].status == NodeStatus.SOLVED and wm.nodes["a1"].parent_id == "a"
    assert wm.nodes["b"].status == NodeStatus.OPEN
    assert wm.kernel_summary == "softmax is memory-bound"

    store = runner.open_store(ws)
    try:
        assert rounds_of(store, "r1") == EXPECTED_ROUNDS
        attempts = store.list_attempts("r1")
        # On the CPU nothing is timed, so the first passing candidate stays the best (no score can beat it).
        assert outcome.best is not None and outcome.best.node_id == "a"
        assert outcome.best.candidate_id == attempts[1]["candidate_id"]
        assert outcome.best.score is None
        # cycle c2 started from a's code: its first prompt is an action-on-base prompt
        assert [a["prompt_kind"] for a in attempts] == [
            "action_from_spec",
            "debug",
            "improve",
            "improve",
            "action_on_base",
            "improve",
        ]
        keys = [c["call_key"] for c in store.list_llm_calls("r1")]
        assert keys == [
            "plan:0:0",
            "write:c1:1",
            "write:c1:2",
            "write:c1:3",
            "write:c1:4",
            "plan:1:0",
            "write:c2:1",
            "write:c2:2",
        ]
        run = store.get_run("r1")
        assert run["status"] == "finished" and run["rounds_used"] == 6
        assert run["best_candidate_id"] == outcome.best.candidate_id
        assert len(store.list_snapshots("r1")) >= 4
        # the evaluation of the incorrect round says where it went wrong
        wrong = store.get_evaluation(attempts[0]["evaluation_id"])
        assert wrong.mismatch is not None and wrong.mismatch.config
    finally:
        store.close()


@pytest.mark.usefixtures("fake_executor")
def test_replay_of_a_finished_run_takes_the_same_path(tmp_path):
    script = two_cycle_script(tmp_path / "script.jsonl")
    ws = tmp_path / "ws"
    runner.start_run(config(script), workspace=ws)

    replay_cfg = runner.replay_config("r1", workspace=ws)
    assert replay_cfg.model == "replay:r1" and replay_cfg.replay_of == "r1"
    outcome = runner.start_run(replay_cfg, workspace=ws)
    assert outcome.status == "finished" and outcome.rounds_used == 6

    store = runner.open_store(ws)
    try:
        assert rounds_of(store, replay_cfg.run_id) == EXPECTED_ROUNDS
        original = [a["candidate_id"] for a in store.list_attempts("r1")]
        replayed = [a["candidate_id"] for a in store.list_attempts(replay_cfg.run_id)]
        assert replayed == original
        calls = store.list_llm_calls(replay_cfg.run_id)
        assert calls and all(c["replayed"] == 1 for c in calls)
        assert store.get_run(replay_cfg.run_id)["parent_run_id"] == "r1"
    finally:
        store.close()


@pytest.mark.usefixtures("fake_executor")
def test_replay_that_runs_out_of_replies_finishes_cleanly(tmp_path):
    script = two_cycle_script(tmp_path / "script.jsonl")
    lines = script.read_text().splitlines()
    script.write_text("\n".join(lines[:4]) + "\n")  # comment + plan + two writes
    outcome = runner.start_run(config(script, run_id="short"), workspace=tmp_path / "ws")
    assert outcome.status == "finished"
    assert "replay" in (outcome.done_reason or "")
    assert outcome.rounds_used == 2


@pytest.mark.gpu
def test_full_run_on_gpu_times_kernels_and_promotes_the_fastest(tmp_path):
    script = two_cycle_script(tmp_path / "script.jsonl")
    cfg = RunConfig(
        run_id="gpu", task="softmax", model=f"replay:{script}", device="cuda", max_rounds=6, stagnation_window=2
    )
    outcome = runner.start_run(cfg, workspace=tmp_path / "ws")
    assert outcome.status == "finished"
    store = runner.open_store(tmp_path / "ws")
    try:
        attempts = store.list_attempts("gpu")
        passed = [a for a in attempts if a["verdict"] == "passed"]
        assert attempts[0]["verdict"] == "incorrect" and passed
        assert all(a["score"] is not None and a["score"] > 0 for a in passed)
        assert outcome.best is not None and outcome.best.latency_ms is not None and outcome.best.latency_ms > 0
        # promotion is by paired re-measurement: a node with a higher single-measurement score than the best was
        # compared with the incumbent and not confirmed faster beyond the noise (a near-tie keeps the incumbent)
        solved = outcome.world_model.solved_nodes()
        assert outcome.best.score in [n.solution.score for n in solved]
        comparisons = store._query("select challenger_id, improved from comparisons", [])
        for node in solved:
            if node.solution.score > outcome.best.score:
                assert any(c["challenger_id"] == node.solution.candidate_id and not c["improved"] for c in comparisons)
        best_eval = store.get_evaluation(outcome.best.evaluation_id)
        assert best_eval.timed and len(best_eval.timings) == 4
        for line in [f"{a['cycle_id']}.{a['attempt']} {a['verdict']} score={a['score']}" for a in attempts]:
            print(line)
        for t in best_eval.timings:
            print(f"best {t.config}: median {t.median_ms:.4f} ms stdev {t.stdev_ms:.4f} n={t.samples}")
    finally:
        store.close()


@pytest.mark.usefixtures("fake_executor")
def test_parallel_cycles_fan_out_and_fold_back(tmp_path):
    from tests.helpers.scripts import WRONG_KERNEL, fenced, init_plan, row_kernel, write_script

    script = write_script(
        tmp_path / "parallel.jsonl",
        [
            ("plan:0:0", init_plan([("a", 0.9), ("b", 0.8), ("c", 0.1)])),
            ("write:c1:1", fenced(row_kernel(1))),
            ("write:c1:2", fenced(row_kernel(2))),
            ("write:c2:1", fenced(WRONG_KERNEL.format(sleep=0.0, variant=3))),
            ("write:c2:2", fenced(WRONG_KERNEL.format(sleep=0.0, variant=4))),
        ],
    )
    cfg = config(script, run_id="par", max_rounds=4, parallel_cycles=2)
    outcome = runner.start_run(cfg, workspace=tmp_path / "ws")

    assert outcome.status == "finished" and outcome.rounds_used == 4
    wm = outcome.world_model
    assert wm.nodes["a"].status == NodeStatus.SOLVED
    assert wm.nodes["b"].status == NodeStatus.FAILED and wm.nodes["b"].failed_cycles == 1
    assert wm.nodes["c"].status == NodeStatus.OPEN  # only the top two actions ran
    store = runner.open_store(tmp_path / "ws")
    try:
        rounds = sorted(rounds_of(store, "par"))
        assert rounds == [("c1", 1, "passed"), ("c1", 2, "passed"), ("c2", 1, "incorrect"), ("c2", 2, "incorrect")]
        by_cycle = {a["cycle_id"]: a["node_id"] for a in store.list_attempts("par")}
        assert by_cycle == {"c1": "a", "c2": "b"}
    finally:
        store.close()
