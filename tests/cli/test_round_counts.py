"""Round numbers and counts on the screen are the store's, also after a resume or a reply that arrives mid-cycle,
and nothing says "resuming" before the run really goes on (issue 35, items 3, 4 and 8)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ksearch.cli import app
from ksearch.flows.report_gather import gather_run_report
from ksearch.flows.workspace import DB_NAME
from ksearch.store import Store
from tests.helpers.scripts import demo_replies

runner = CliRunner()


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.mark.usefixtures("fake_executor")
@pytest.mark.slow
def test_rounds_answered_mid_cycle_are_numbered_and_counted_as_the_store_holds_them(tmp_path):
    ws, replies = str(tmp_path / "ws"), demo_replies()
    started = runner.invoke(
        app,
        [
            "-w",
            ws,
            "run",
            "softmax",
            "--model",
            "interactive",
            "--device",
            "cpu",
            "--max-rounds",
            "6",
            "--stagnation-window",
            "2",
            "--run-id",
            "live",
        ],
    )
    assert started.exit_code == 0, started.output
    for key in ("plan:0:0", "write:c1:1"):
        answered = runner.invoke(app, ["-w", ws, "respond", "live", "--key", key], input=replies[key])
        assert answered.exit_code == 0, answered.output
    # one round stored, its cycle still open: the run waits for the coder's second kernel
    assert "round 1/6 c1.1" in flat(answered.output)
    assert "is waiting after 1 round;" in flat(answered.output)
    listed = runner.invoke(app, ["-w", ws, "runs", "--json"])
    [row] = json.loads(listed.output)
    assert (row["rounds_used"], row["rounds_passed"]) == (1, 0)  # c1.1 forgets the row maximum: incorrect

    answered = runner.invoke(app, ["-w", ws, "respond", "live", "--key", "write:c1:2"], input=replies["write:c1:2"])
    assert answered.exit_code == 0, answered.output
    assert "round 2/6 c1.2" in flat(answered.output) and "round 1/6" not in flat(answered.output)
    assert "is waiting after 2 rounds" in flat(answered.output)
    listed = runner.invoke(app, ["-w", ws, "runs"])
    assert re.search(r"^live\s+waiting\s+2\s+1\s+-\s", listed.output, re.MULTILINE), listed.output
    store = Store(Path(ws) / DB_NAME)
    try:  # the report's header counts what it plots
        report = gather_run_report(store, "live")
        assert report.rounds_used == len([p for p in report.points if not p.is_seed]) == 2
    finally:
        store.close()


def test_resume_of_a_finished_run_refuses_without_saying_resuming(tmp_path):
    ws = tmp_path / "ws"
    store = Store(ws / DB_NAME)
    store.create_run(
        {
            "id": "done",
            "task": "softmax",
            "model": "replay:x",
            "language": "triton",
            "device": "cpu",
            "status": "finished",
            "config": {"run_id": "done", "task": "softmax", "model": "replay:x"},
        }
    )
    store.close()
    result = runner.invoke(app, ["-w", str(ws), "resume", "done"])
    assert result.exit_code == 1
    assert "already finished" in str(result.exception)
    assert "resuming" not in result.output
