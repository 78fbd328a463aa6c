"""``--seed-from``: a solution evaluated before planning, attached to the root, edited by the first cycles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ksearch.agent.config import RunConfig
from ksearch.agent.world_model import ROOT_ID, NodeStatus
from ksearch.cli import app
from ksearch.contracts.evaluation import Verdict
from ksearch.errors import UserError
from ksearch.flows import run as runner
from tests.helpers.scripts import WRONG_KERNEL, fenced, init_plan, row_kernel, write_script

pytestmark = pytest.mark.slow

SEED = Path(__file__).resolve().parents[1] / "tasks" / "data" / "softmax_triton_ok.py"


def seeded_script(path: Path) -> Path:
    return write_script(
        path,
        [
            ("plan:0:0", init_plan([("a", 0.9), ("b", 0.5)])),
            ("write:c1:1", fenced(row_kernel(1))),
            ("write:c1:2", fenced(row_kernel(2))),
            ("plan:1:0", json.dumps({"ops": []})),
        ],
    )


def config(script: Path, seed: Path, run_id: str = "s1", **overrides) -> RunConfig:
    return RunConfig(
        run_id=run_id,
        task="softmax",
        model=f"replay:{script}",
        device="cpu",
        max_rounds=2,
        stagnation_window=2,
        seed_from=str(seed),
        **overrides,
    )


@pytest.mark.usefixtures("in_process_executor")  # the seed passes by its own code
def test_seed_is_evaluated_attached_to_the_root_and_edited_by_the_first_cycle(tmp_path):
    ws = tmp_path / "ws"
    outcome = runner.start_run(config(seeded_script(tmp_path / "s.jsonl"), SEED), workspace=ws)
    assert outcome.status == "finished" and outcome.rounds_used == 2

    store = runner.open_store(ws)
    try:
        run = store.get_run("s1")
        seed_id = run["config"]["seed_candidate_id"]
        assert seed_id and run["config"]["seed_from"] == str(SEED)
        assert store.get_candidate(seed_id).code == SEED.read_text()
        # the seed is a candidate and an evaluation like any other, recorded as attempts row 0
        attempts = store.list_attempts("s1")
        assert [(a["cycle_id"], a["attempt"], a["verdict"]) for a in attempts] == [
            ("seed", 0, "passed"),
            ("c1", 1, "passed"),
            ("c1", 2, "passed"),
        ]
        assert attempts[0]["candidate_id"] == seed_id and attempts[0]["node_id"] == ROOT_ID
        assert store.get_evaluation(attempts[0]["evaluation_id"]).passed
        # the root holds the seed, so the first cycle edits it rather than starting from the spec
        root = outcome.world_model.root
        assert root.solution is not None and root.solution.candidate_id == seed_id
        assert root.status == NodeStatus.SOLVED
        assert attempts[1]["prompt_kind"] == "action_on_base"
        prompt = next(c["prompt"] for c in store.list_llm_calls("s1") if c["call_key"] == "write:c1:1")
        assert "def _softmax_row(x_ptr, y_ptr, stride_x, stride_y, n_cols" in prompt  # the seed's code
        # on the CPU nothing is timed: the untimed seed stays the best (an untimed pass never displaces it)
        assert outcome.best is not None and outcome.best.node_id == ROOT_ID and outcome.best.candidate_id == seed_id
        assert run["best_candidate_id"] == seed_id
    finally:
        store.close()

    # a replay re-uses the stored seed (not the file) and takes the same path
    replay_cfg = runner.replay_config("s1", workspace=ws)
    assert replay_cfg.seed_candidate_id == seed_id
    again = runner.start_run(replay_cfg, workspace=ws)
    assert again.status == "finished" and again.world_model.root.solution.candidate_id == seed_id


@pytest.mark.usefixtures("fake_executor")
def test_a_seed_that_does_not_pass_stops_before_the_run_is_created(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(WRONG_KERNEL.format(sleep=0.0, variant=0))
    ws = tmp_path / "ws"
    with pytest.raises(UserError, match="does not pass: incorrect"):
        runner.start_run(config(seeded_script(tmp_path / "s.jsonl"), bad), workspace=ws)
    with pytest.raises(UserError, match="cannot read the seed"):
        runner.start_run(config(seeded_script(tmp_path / "s.jsonl"), tmp_path / "missing.py"), workspace=ws)
    store = runner.open_store(ws)
    try:
        assert store.list_runs() == []
    finally:
        store.close()


def test_cli_run_with_seed_from(tmp_path, fake_executor):
    fake_executor.table[SEED.read_text()] = Verdict.PASSED  # as the first test finds it in the in-process executor
    script = seeded_script(tmp_path / "s.jsonl")
    result = CliRunner().invoke(
        app,
        [
            "--workspace",
            str(tmp_path / "ws"),
            "run",
            "softmax",
            "--model",
            f"replay:{script}",
            "--device",
            "cpu",
            "--max-rounds",
            "1",
            "--run-id",
            "cli-seed",
            "--seed-from",
            str(SEED),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "new best: node root, seed: passed" in result.output
    store = runner.open_store(tmp_path / "ws")
    try:
        assert store.list_attempts("cli-seed")[0]["cycle_id"] == "seed"
    finally:
        store.close()
