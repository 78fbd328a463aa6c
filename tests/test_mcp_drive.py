"""scripts/mcp_drive.py on the CPU with the softmax task: a run started, answered and evaluated only through the MCP
server's tools, across three calls of the script as a campaign makes them (the GPU machine starts the run; a
``--prompts-only`` server on the machine without it takes the replies and stops where a kernel waits; the GPU
machine's ``resume_run`` evaluates it and the run goes on to its end)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")
from tests.helpers.scripts import demo_replies  # noqa: E402

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "mcp_drive.py"


def drive(ws: Path, replies: Path, out: Path, *extra: str, run_id: str = "campaign") -> subprocess.CompletedProcess:
    command = [sys.executable, str(SCRIPT), str(ws), str(replies), str(out), "--run-id", run_id, *extra]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(command, capture_output=True, text=True, timeout=800, cwd=REPO, env=env)


@pytest.mark.timeout(900)  # three calls, each an MCP server and its `ksearch resume` drivers, on a busy machine
def test_a_run_goes_from_start_to_end_through_mcp_with_its_kernels_evaluated_where_the_device_is(tmp_path):
    ws, replies, out = tmp_path / "ws", tmp_path / "replies", tmp_path / "out"
    replies.mkdir()
    demo = demo_replies()
    (replies / "r01-planner.md").write_text(demo["plan:0:0"])

    first = drive(ws, replies, out, "--", "task=softmax", "device=cpu", "max_rounds=2", "stagnation_window=2")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "starting campaign through MCP start_run" in first.stdout
    summary = json.loads((out / "drive.json").read_text())
    assert summary["status"] == "waiting" and summary["waiting_for"] == ["r01-coder"], first.stdout
    assert (out / "prompts" / "r01-coder.md").is_file()

    # The machine without the device: the reply goes in through a --prompts-only server, which writes the kernel and
    # stops where it waits for evaluation. A new run cannot start there (its seed is evaluated when it is created).
    (replies / "r01-coder.md").write_text(demo["write:c1:1"])
    (replies / "r02-coder.md").write_text(demo["write:c1:2"])
    second = drive(ws, replies, out, "--prompts-only")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "kernels wait for the GPU" in second.stdout
    summary = json.loads((out / "drive.json").read_text())
    assert summary["trajectory"] == [] and summary["status"] == "waiting", summary
    refused = drive(ws, replies, tmp_path / "other", "--prompts-only", "--", "task=softmax", run_id="new-here")
    assert refused.returncode == 1 and "plans and writes only" in refused.stderr, refused.stdout + refused.stderr

    third = drive(ws, replies, out, "--save-db", str(tmp_path / "copy.db"))
    assert third.returncode == 0, third.stdout + third.stderr
    summary = json.loads((out / "drive.json").read_text())
    assert summary["status"] == "finished" and summary["rounds_used"] == 2, summary
    assert [(r["round"], r["verdict"]) for r in summary["trajectory"]] == [(1, "incorrect"), (2, "passed")]
    lines = (out / "replies.jsonl").read_text().splitlines()
    assert "mcp_drive.py, through ksearch's MCP server" in lines[0]
    keys = [json.loads(line)["call_key"] for line in lines[1:]]
    assert keys == ["plan:0:0", "write:c1:1", "write:c1:2"]
    assert (tmp_path / "copy.db").stat().st_size > 0
