"""Steering and forks end to end on the CPU: acts given while a run waits take effect at its next step, are recorded
in the store, shown by `show` and reproduced by `replay`; approvals gate new bests; a fork continues a past run from
a round with another model, inheriting everything up to that round."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ksearch.agent.config import RunConfig
from ksearch.errors import UserError
from ksearch.flows import fork as fork_flow
from ksearch.flows import interactive, steering
from ksearch.flows import run as runner
from tests.helpers.scripts import fenced, init_plan, row_kernel

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "softmax-demo.jsonl"
WIDE = {**os.environ, "COLUMNS": "250"}  # so that rich wraps no table cell of `show`


def attempts(ws: Path, run_id: str) -> list[tuple]:
    store = runner.open_store(ws)
    try:
        return [
            (a["cycle_id"], a["attempt"], a["node_id"], a["verdict"], a["candidate_id"])
            for a in store.list_attempts(run_id)
        ]
    finally:
        store.close()


@pytest.mark.usefixtures("fake_executor")
def test_steering_acts_apply_at_the_next_step_and_replay_alike(tmp_path):
    ws = tmp_path / "ws"
    config = RunConfig(
        run_id="steered",
        task="softmax",
        model="interactive",
        device="cpu",
        max_rounds=4,
        stagnation_window=1,
        require_approval=True,
    )
    outcome = runner.start_run(config, workspace=ws)
    assert [w.prompt.key for w in outcome.pending] == ["plan:0:0"]
    with pytest.raises(UserError, match="does not exist"):  # checked against the latest tree before it is queued
        steering.steer("steered", "pin", {"node_id": "b"}, author="alice", workspace=ws)
    interactive.respond("steered", init_plan([("a", 0.9), ("b", 0.5)]), workspace=ws)

    # While c1 (on `a`) waits for its first kernel: a person's hypothesis, pinned though its score is lowest, and b
    # pruned. Both take effect at the next step, after the planner's edits.
    added = steering.steer(
        "steered",
        "add",
        {"parent_id": "root", "title": "Two rows per program", "score": 0.1, "node_id": "mine", "pin": True},
        author="alice",
        workspace=ws,
    )
    assert "queued" in added.message and "added hypothesis 'mine'" in added.message
    steering.steer("steered", "prune", {"node_id": "b"}, author="alice", workspace=ws)

    decisions = iter(["reject", "approve"])
    kernels = iter(range(1, 20))
    answered_approvals = []
    while (view := interactive.pending("steered", workspace=ws)).status != "finished":
        [waiting] = [w for w in view.prompts if not w.answered]
        prompt = waiting.prompt
        if prompt.kind == "approval":
            assert "Promote a new best?" in prompt.prompt
            with pytest.raises(UserError, match="approval"):
                interactive.respond("steered", "yes", workspace=ws)
            act = next(decisions)
            steering.steer("steered", act, {}, author="bob", workspace=ws)
            answered_approvals.append((act, prompt.details["node_id"]))
        elif prompt.role == "planner":
            interactive.respond("steered", json.dumps({"ops": []}), workspace=ws)
        else:
            interactive.respond("steered", fenced(row_kernel(next(kernels))), workspace=ws)

    # The first pass (c1 on a) was rejected, so the first pass of c2 (on the pinned hypothesis) was asked for again.
    assert answered_approvals == [("reject", "a"), ("approve", "mine")]
    rounds = attempts(ws, "steered")
    assert [r[2] for r in rounds][-1] == "mine" and "b" not in {r[2] for r in rounds}
    store = runner.open_store(ws)
    try:
        run = store.get_run("steered")
        assert run["status"] == "finished"
        best_node = runner.load_final_state("steered", workspace=ws).best.node_id
        assert best_node == "mine"
        acts = steering.acts("steered", workspace=ws)
        assert [(a["act"], a["status"], a["author"], a["applied_step"]) for a in acts] == [
            ("add", "applied", "alice", 1),
            ("prune", "applied", "alice", 1),
            ("reject", "applied", "bob", 0),
            ("approve", "applied", "bob", 1),
        ]
    finally:
        store.close()

    shown = subprocess.run(
        [sys.executable, "-m", "ksearch.cli", "--workspace", str(ws), "show", "steered"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=WIDE,
    )
    assert shown.returncode == 0, shown.stderr
    assert "steering" in shown.stdout and "Two rows per program" in shown.stdout and "added by a person" in shown.stdout
    assert "reject" in shown.stdout and "bob" in shown.stdout

    # A replay serves the recorded replies and applies the same acts at the same steps: the same path, no pause.
    replayed = runner.start_run(runner.replay_config("steered", workspace=ws), workspace=ws)
    assert replayed.status == "finished" and replayed.best is not None and replayed.best.node_id == "mine"
    assert attempts(ws, replayed.run_id) == rounds
    copied = steering.acts(replayed.run_id, workspace=ws)
    assert [(a["act"], a["status"], a["applied_step"]) for a in copied] == [
        ("add", "applied", 1),
        ("prune", "applied", 1),
        ("reject", "applied", 0),
        ("approve", "applied", 1),
    ]
    assert all(a["copied_from"].startswith("steered#") for a in copied)


@pytest.mark.usefixtures("fake_executor")
def test_fork_continues_a_run_from_a_round_with_another_model(tmp_path):
    ws = tmp_path / "ws"
    demo = runner.start_run(
        RunConfig(
            run_id="demo", task="softmax", model=f"replay:{DEMO}", device="cpu", max_rounds=6, stagnation_window=2
        ),
        workspace=ws,
    )
    parent = attempts(ws, "demo")
    assert demo.status == "finished" and len(parent) == 6

    # At a step boundary (cycle c1 ended with round 4): nothing before it runs again.
    at4 = fork_flow.fork_run("demo", 4, updates={"model": f"replay:{DEMO}", "run_id": "fork4"}, workspace=ws)
    assert at4.status == "finished" and at4.best is not None and at4.best.candidate_id == demo.best.candidate_id
    assert attempts(ws, "fork4") == parent
    store = runner.open_store(ws)
    try:
        row = store.get_run("fork4")
        assert row["parent_run_id"] == "demo" and row["fork_round"] == 4
        calls = {c["call_key"]: c for c in store.list_llm_calls("fork4")}
        inherited = ["plan:0:0", "write:c1:1", "write:c1:2", "write:c1:3", "write:c1:4"]
        assert all(calls[k]["replayed"] for k in inherited)
        assert {"plan:1:0", "write:c2:1", "write:c2:2"} <= set(calls)
    finally:
        store.close()

    # Inside a step (round 2 of c1's 4): the step re-runs, its first two rounds served from the parent's replies and
    # evaluations; the fork's model (a person here) is asked from round 3 on.
    at2 = fork_flow.fork_run("demo", 2, updates={"model": "interactive", "run_id": "fork2"}, workspace=ws)
    assert at2.status == "waiting" and [w.prompt.key for w in at2.pending] == ["write:c1:3"]
    assert attempts(ws, "fork2") == parent[:2]

    with pytest.raises(UserError, match="cannot fork at round 9"):
        fork_flow.create_fork("demo", 9, workspace=ws)

    shown = subprocess.run(
        [sys.executable, "-m", "ksearch.cli", "--workspace", str(ws), "show", "fork2"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=WIDE,
    )
    assert shown.returncode == 0, shown.stderr
    assert "forked from demo at round 2" in shown.stdout and "write:c1:3" in shown.stdout
