"""scripts/interactive_drive.py on the CPU with the softmax task: the demo's replies, renamed by round and role, drive
an interactive run in two calls of the script (it stops where the replies run out), through a repair, and the
replay file it writes re-runs the same search."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ksearch.agent.config import RunConfig
from ksearch.flows import run as runner
from tests.helpers.scripts import demo_replies

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "interactive_drive.py"
# The demo's call keys, named as a person writing replies round by round names them (one cycle of 4 rounds, a
# new plan, a cycle of 2 rounds).
NAMES = {
    "plan:0:0": "r01-planner",
    "write:c1:1": "r01-coder",
    "write:c1:2": "r02-coder",
    "write:c1:3": "r03-coder",
    "write:c1:4": "r04-coder",
    "plan:1:0": "r05-planner",
    "write:c2:1": "r05-coder",
    "write:c2:2": "write_c2_2",  # a file named by the call key answers too
}


def drive(ws: Path, replies: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(SCRIPT), str(ws), str(replies), str(out), "--run-id", "hand", *extra]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=600, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_replies_by_round_and_role_drive_a_run_until_they_run_out(tmp_path):
    ws, replies, out = tmp_path / "ws", tmp_path / "replies", tmp_path / "out"
    replies.mkdir()
    demo = demo_replies()
    for key in ("plan:0:0", "write:c1:1", "write:c1:2"):
        (replies / f"{NAMES[key]}.md").write_text(demo[key])

    first = drive(ws, replies, out, "--", "softmax", "--device", "cpu", "--max-rounds", "6", "--stagnation-window", "2")
    summary = json.loads((out / "drive.json").read_text())
    assert summary["status"] == "waiting" and summary["waiting_for"] == ["r03-coder"], first.stdout
    assert [(r["round"], r["cycle"], r["verdict"]) for r in summary["trajectory"]] == [
        (1, "c1", "incorrect"),
        (2, "c1", "passed"),
    ]
    assert sorted(p.name for p in (out / "prompts").iterdir()) == [
        "r01-coder.md",
        "r01-planner.md",
        "r02-coder.md",
        "r03-coder.md",
    ]
    planner = (out / "prompts" / "r01-planner.md").read_text()
    assert "WORLD MODEL (planner)" in planner and '"ops"' in planner  # the prompt and the JSON schema of the reply
    assert "write the reply as" in first.stdout and "r03-coder.md" in first.stdout

    # The rest of the replies; the second plan's first reply is no edit script, so its repair prompt asks again.
    for key in ("write:c1:3", "write:c1:4", "write:c2:1", "write:c2:2"):
        (replies / f"{NAMES[key]}.md").write_text(demo[key])
    (replies / "r05-planner.md").write_text("I would rather tile by two rows first.")
    (replies / "r05-planner-repair1.md").write_text(demo["plan:1:0"])
    drive(ws, replies, out, "--save-db", str(out / "ksearch.db"))
    summary = json.loads((out / "drive.json").read_text())
    assert summary["status"] == "finished" and summary["rounds_used"] == 6 and summary["waiting_for"] == []
    assert [r["round"] for r in summary["trajectory"]] == [1, 2, 3, 4, 5, 6]
    assert summary["best_candidate_id"] and all(r["action"] for r in summary["trajectory"])
    assert "| 6 | c2 | 2 |" in (out / "trajectory.md").read_text()
    assert "no JSON object" in (out / "prompts" / "r05-planner-repair1.md").read_text()

    # The saved database is one consistent file holding the whole run.
    with sqlite3.connect(out / "ksearch.db") as db:
        assert db.execute("select status, rounds_used from runs where id = 'hand'").fetchone() == ("finished", 6)

    # replies.jsonl is a replay file, labelled hand-written, that re-runs the same search.
    lines = (out / "replies.jsonl").read_text().splitlines()
    assert lines[0].startswith("// HAND-WRITTEN") and json.loads(lines[1])["note"].startswith("HAND-WRITTEN")
    assert [json.loads(line)["call_key"] for line in lines[1:]][5:8] == ["plan:1:0", "plan:1:0#repair1", "write:c2:1"]
    config = RunConfig(
        run_id="again",
        task="softmax",
        model=f"replay:{out / 'replies.jsonl'}",
        device="cpu",
        max_rounds=6,
        stagnation_window=2,
    )
    again = runner.start_run(config, workspace=ws)
    assert again.status == "finished" and again.best is not None
    assert again.best.candidate_id == summary["best_candidate_id"]


def test_prompts_only_writes_where_there_is_no_device_and_stops_where_kernels_wait_for_it(tmp_path):
    ws, replies, out = tmp_path / "ws", tmp_path / "replies", tmp_path / "out"
    replies.mkdir()
    demo = demo_replies()
    for key in ("plan:0:0", "write:c1:1"):
        (replies / f"{NAMES[key]}.md").write_text(demo[key])

    written = drive(
        ws,
        replies,
        out,
        "--prompts-only",
        "--",
        "softmax",
        "--device",
        "cpu",
        "--max-rounds",
        "6",
        "--stagnation-window",
        "2",
    )
    summary = json.loads((out / "drive.json").read_text())
    assert summary["status"] == "waiting" and summary["trajectory"] == [], written.stdout
    assert summary["stopped_because"].startswith("--prompts-only") and "kernels wait for the GPU" in written.stdout
    assert sorted(p.name for p in (out / "prompts").iterdir()) == ["r01-coder.md", "r01-planner.md"]

    evaluated = drive(ws, replies, out)  # where the device is: round 1 is evaluated, then round 2's prompt waits
    summary = json.loads((out / "drive.json").read_text())
    assert [(r["round"], r["verdict"]) for r in summary["trajectory"]] == [(1, "incorrect")], evaluated.stdout
    assert summary["waiting_for"] == ["r02-coder"]


def test_parallel_prompts_of_one_round_are_saved_and_answered_by_call_key():
    """Two cycles' first kernels wait in the same round: a round-and-role name would save both prompts to one file
    (the second overwriting the first, as in issue 33's search), so they go by call key; a lone prompt keeps both."""
    import importlib.util

    from ksearch.llm.interactive import Prompt, ReplyFormat, Waiting

    spec = importlib.util.spec_from_file_location("interactive_drive", SCRIPT)
    drive_module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(drive_module)

    def waiting(key: str, role: str) -> Waiting:
        reply = ReplyFormat(kind="code", description="code")
        return Waiting(interrupt_id=key, prompt=Prompt(key=key, role=role, prompt="p", reply_format=reply))

    both = drive_module.prompt_names([waiting("write:c1:1", "coder"), waiting("write:c2:1", "coder")], 1)
    assert both == [["write_c1_1"], ["write_c2_1"]]
    assert drive_module.prompt_names([waiting("plan:0:0", "planner")], 1) == [["r01-planner", "plan_0_0"]]


def test_an_approval_file_says_approve_or_reject_first_and_a_reply_is_found_by_any_of_its_names(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("interactive_drive", SCRIPT)
    drive_module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(drive_module)

    assert drive_module.approval_decision(tmp_path / "r03-approval.md", "Approve\nfaster on every shape") == "approve"
    assert drive_module.approval_decision(tmp_path / "r03-approval.md", "reject\n") == "reject"
    with pytest.raises(SystemExit, match="must start with `approve` or `reject`"):
        drive_module.approval_decision(tmp_path / "r03-approval.md", "")
    (tmp_path / "plan_0_0.md").write_text("{}")
    assert drive_module.reply_file(tmp_path, ["r01-planner", "plan_0_0"]) == tmp_path / "plan_0_0.md"
    assert drive_module.reply_file(tmp_path, ["r02-coder"]) is None
