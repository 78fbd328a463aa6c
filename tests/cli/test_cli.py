"""The CLI parses, calls the library and prints; expected failures are one line plus a hint, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from ksearch.cli import app
from tests.helpers.scripts import two_cycle_script

runner = CliRunner()


def test_tasks_lists_builtin_softmax():
    result = runner.invoke(app, ["tasks"])
    assert result.exit_code == 0
    assert "softmax" in result.output


def test_runs_on_empty_workspace(tmp_path):
    result = runner.invoke(app, ["--workspace", str(tmp_path), "runs", "--json"])
    assert result.exit_code == 0
    assert result.output.strip() == "[]"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "softmax", "--model", "gpt-4o", "--device", "cpu"], "not of the form provider:model"),
        (["run", "no-such-task", "--model", "replay:x.jsonl", "--device", "cpu"], "softmax"),
        (["run", "softmax", "--model", "openai:gpt-4o", "--device", "cpu"], "OPENAI_API_KEY"),
        (["run", "softmax", "--model", "replay:missing.jsonl", "--device", "cpu"], "cannot read replay file"),
        (["show", "nope"], "no run"),
        (["resume", "nope"], "ksearch runs"),
    ],
)
def test_expected_failures_are_one_line_with_hint(tmp_path, args, message):
    proc = subprocess.run(
        [sys.executable, "-m", "ksearch.cli", "--workspace", str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert message in proc.stderr.replace("\n", " ")
    assert "Traceback" not in proc.stderr


def test_bad_option_value_is_reported_per_field(tmp_path):
    result = runner.invoke(
        app,
        ["--workspace", str(tmp_path), "run", "softmax", "--model", "replay:x", "--max-cost", "1", "--device", "cpu"],
    )
    assert result.exit_code == 2
    assert "--max-cost" in result.output


@pytest.mark.usefixtures("fake_executor")
@pytest.mark.slow
def test_run_show_runs_and_demo_output(tmp_path):
    script = two_cycle_script(tmp_path / "s.jsonl")
    ws = str(tmp_path / "ws")
    result = runner.invoke(
        app,
        [
            "--workspace",
            ws,
            "run",
            "softmax",
            "--model",
            f"replay:{script}",
            "--device",
            "cpu",
            "--max-rounds",
            "6",
            "--stagnation-window",
            "2",
            "--run-id",
            "cli-run",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "round   1/6 c1.1: incorrect" in result.output
    assert "new best" in result.output
    assert "best kernel" in result.output and "correctness only" in result.output

    listed = runner.invoke(app, ["--workspace", ws, "runs"])
    assert "cli-run" in listed.output and "finished" in listed.output
    shown = runner.invoke(app, ["--workspace", ws, "show", "cli-run"])
    assert shown.exit_code == 0
    assert "a1" in shown.output and "solved" in shown.output
    code = runner.invoke(app, ["--workspace", ws, "show", "cli-run", "--code"])
    assert code.exit_code == 0
    assert code.output.startswith("import") and "def kernel" in code.output and "solved" not in code.output
