"""ksearch under a script (issue 64): exit statuses a script can rely on (0 a kernel passed, 3 none passed, 1 an
error) and one JSON object on stdout with `--json` for run, resume, eval and report, errors included."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ksearch.cli import app
from ksearch.cli.errors import ExitCode
from tests.helpers.scripts import WRONG_KERNEL, fenced, init_plan, row_kernel, write_script

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
cli = CliRunner()
CPU = ("--device", "cpu")


def ksearch(ws: Path, *args: str, fake: bool = False) -> subprocess.CompletedProcess[str]:
    """The installed command in a child process: stdout is a pipe, as under a script. ``fake``: its runs evaluate
    with the fake executor (``tests/helpers/fake_cli.py``): these tests check exit statuses and JSON, and ``ksearch
    eval`` below drives the real evaluator."""
    module = "tests.helpers.fake_cli" if fake else "ksearch.cli"
    return subprocess.run(
        [sys.executable, "-m", module, "--workspace", str(ws), *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )


def failing_script(path: Path) -> Path:
    """One action, one round: a kernel that is wrong."""
    return write_script(
        path, [("plan:0:0", init_plan([("a", 0.9)])), ("write:c1:1", fenced(WRONG_KERNEL.format(sleep=0, variant=1)))]
    )


def test_a_run_where_no_kernel_passed_exits_3_and_says_so_in_json(tmp_path):
    ws = tmp_path / "ws"
    script = failing_script(tmp_path / "fails.jsonl")
    done = ksearch(ws, "run", "softmax", "--model", f"replay:{script}", *CPU, "--max-rounds", "1", "--json", fake=True)
    assert done.returncode == ExitCode.NO_KERNEL_PASSED == 3, done.stdout + done.stderr
    result = json.loads(done.stdout)  # stdout is the JSON object alone; progress went to stderr
    assert result["status"] == "finished" and result["passed"] is False and result["best"] is None
    assert result["rounds_used"] == 1 and result["exit_code"] == 3
    assert "round   1/1" in done.stderr


def test_a_run_that_found_a_kernel_exits_0_with_its_best_in_json_and_resume_json_refuses_in_json(tmp_path):
    ws = tmp_path / "ws"
    script = write_script(
        tmp_path / "passes.jsonl",
        [("plan:0:0", init_plan([("a", 0.9)])), ("write:c1:1", fenced(row_kernel(1)))],
    )
    done = ksearch(
        ws,
        "run",
        "softmax",
        "--model",
        f"replay:{script}",
        *CPU,
        "--max-rounds",
        "1",
        "--run-id",
        "ok1",
        "--json",
        fake=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["run_id"] == "ok1" and result["passed"] is True and result["exit_code"] == 0
    assert result["best"]["verdict"] == "passed" and result["best"]["summary"].startswith("passed")

    again = ksearch(ws, "resume", "ok1", "--json", fake=True)  # finished: an error, as JSON too
    assert again.returncode == ExitCode.ERROR == 1
    error = json.loads(again.stdout)
    assert "already finished" in error["error"] and error["exit_code"] == 1 and "ksearch show ok1" in error["hint"]

    report = ksearch(ws, "report", "ok1", "-o", str(tmp_path / "r.html"), "--json")
    if report.returncode == 1 and "pip install" in report.stderr:
        pytest.skip("the report extra is not installed")
    assert report.returncode == 0, report.stderr
    written = json.loads(report.stdout)
    assert written["runs"] == ["ok1"] and Path(written["path"]) == (tmp_path / "r.html").resolve()
    assert written["bytes"] == (tmp_path / "r.html").stat().st_size > 0


@pytest.mark.usefixtures("fake_executor")
def test_resume_json_of_a_waiting_run_lists_what_it_waits_for(tmp_path):
    ws = tmp_path / "ws"
    started = cli.invoke(
        app, ["--workspace", str(ws), "run", "softmax", "--model", "interactive", *CPU, "--run-id", "w"]
    )
    assert started.exit_code == 0, started.output
    resumed = cli.invoke(app, ["--workspace", str(ws), "resume", "w", "--json"])
    assert resumed.exit_code == 0, resumed.output
    result = json.loads(resumed.stdout)
    assert result["status"] == "waiting" and result["exit_code"] == 0
    assert result["pending"] == [{"key": "plan:0:0", "kind": "llm", "role": "planner", "answered": False}]


def test_eval_exits_3_for_a_kernel_that_fails_and_1_when_it_cannot_evaluate(tmp_path):
    wrong = tmp_path / "wrong.py"
    wrong.write_text(WRONG_KERNEL.format(sleep=0, variant=1))
    failed = cli.invoke(app, ["eval", "softmax", str(wrong), *CPU, "--json"])
    assert failed.exit_code == 3, failed.output
    assert json.loads(failed.stdout)["verdict"] == "incorrect"
    unknown = ksearch(tmp_path / "ws", "eval", "no-such-task", str(wrong), *CPU, "--json")
    assert unknown.returncode == 1
    assert "unknown task" in json.loads(unknown.stdout)["error"]


def test_every_json_command_fails_in_json_too(tmp_path):
    for args in (["show", "nope", "--json"], ["pending", "nope", "--json"], ["runs", "--json"]):
        done = ksearch(tmp_path / "ws", *args)
        if args[0] == "runs":  # an empty workspace is no error: an empty list
            assert done.returncode == 0 and json.loads(done.stdout) == [], done.stderr
            continue
        assert done.returncode == 1, done.stderr
        error = json.loads(done.stdout)
        assert "no run 'nope'" in error["error"] and error["hint"] == "list runs with: ksearch runs"
