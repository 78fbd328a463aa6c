"""The small things a new user trips on (issue 35, item 8): a version, the latest run for `report`, flags checked
before anything is said or run, and errors that name the flags typed."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ksearch.agent.config import RunConfig
from ksearch.cli import app
from ksearch.errors import UserError
from ksearch.flows import placement
from ksearch.flows.fork import fork_config

cli = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def test_version_is_the_packages():
    result = cli.invoke(app, ["--version"])
    assert result.exit_code == 0
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert result.output.strip() == f"ksearch {version}"


def test_report_without_run_reports_the_latest_and_says_which(tmp_path, monkeypatch):
    pytest.importorskip("plotly")
    pytest.importorskip("jinja2")
    from tests.helpers.report_store import write_timed_run

    ws = tmp_path / "ws"
    timed = write_timed_run(ws)
    monkeypatch.chdir(tmp_path)
    result = cli.invoke(app, ["--workspace", str(ws), "report"])
    assert result.exit_code == 0, result.output
    assert f"using the latest run: {timed.run_id}" in result.output
    assert (tmp_path / f"report-{timed.run_id}.html").is_file()


def test_a_bad_model_is_refused_before_the_run_banner(tmp_path):
    result = cli.invoke(app, ["--workspace", str(tmp_path), "run", "softmax", "--model", "nope:x", "--device", "cpu"])
    assert isinstance(result.exception, UserError) and "unknown model provider" in str(result.exception)
    assert "run softmax-" not in result.output and "rounds" not in result.output


@pytest.mark.parametrize("command", [["run", "softmax", "--model", "replay:x.jsonl"], ["eval", "softmax", __file__]])
def test_an_unknown_device_is_called_unknown_not_a_missing_gpu(tmp_path, command):
    result = cli.invoke(app, ["--workspace", str(tmp_path), *command, "--device", "tpu"])
    assert isinstance(result.exception, UserError), result.output
    assert "unknown device 'tpu'" in str(result.exception) and "GPU" not in str(result.exception)


def test_parallel_zero_is_refused(tmp_path):
    result = cli.invoke(
        app,
        [
            "--workspace",
            str(tmp_path),
            "run",
            "softmax",
            "--model",
            "replay:x.jsonl",
            "--device",
            "cpu",
            "--parallel",
            "0",
        ],
    )
    assert isinstance(result.exception, UserError) and "--parallel 0" in str(result.exception)
    with pytest.raises(UserError):
        placement.placement("cpu", 0)


def test_a_file_given_as_workspace_is_said_to_be_a_file(tmp_path):
    file = tmp_path / "notes.txt"
    file.write_text("mine\n")
    result = cli.invoke(app, ["--workspace", str(file), "runs"])
    assert isinstance(result.exception, UserError)
    assert f"the workspace {file} is a file, not a folder" in str(result.exception)
    assert file.read_text() == "mine\n"


def test_invalid_options_name_the_flags_typed(tmp_path):
    result = cli.invoke(
        app,
        [
            "--workspace",
            str(tmp_path),
            "run",
            "softmax",
            "--model",
            "replay:x.jsonl",
            "--device",
            "cpu",
            "--max-rounds",
            "0",
            "--max-tokens",
            "0",
            "--run-timeout",
            "0",
        ],
    )
    assert result.exit_code == 2
    for flag in ("--max-rounds:", "--max-tokens:", "--run-timeout:"):
        assert flag in result.output
    assert "max_rounds" not in result.output and "budget" not in result.output
    parent = RunConfig(run_id="p", task="softmax", model="replay:x", device="cpu")
    with pytest.raises(UserError, match=r"invalid fork options: --max-rounds: ") as info:
        fork_config(parent, 0, {"max_rounds": 0, "parallel_cycles": 0})
    assert "--parallel: " in str(info.value)


def test_a_config_with_an_unknown_device_is_invalid():
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        RunConfig(run_id="r", task="softmax", model="replay:x", device="tpu")
    assert RunConfig(run_id="r", task="softmax", model="replay:x", device="cuda:3").device == "cuda:3"


@pytest.mark.parametrize("command", [["runs"], ["pending"], ["skills", "list"], ["tasks"]])
def test_looking_at_a_workspace_that_does_not_exist_leaves_nothing_behind(tmp_path, command):
    """The log file is made at the first event: a command that only looks creates no folder (a README audit found
    ``WS/logs/ksearch.log`` made by every command)."""
    ws = tmp_path / "ws"
    cli.invoke(app, ["--workspace", str(ws), *command])
    assert not ws.exists()
