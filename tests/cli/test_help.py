"""`--help` is readable in an 80-column terminal: every flag whole, help texts as written (issue 35, item 7)."""

from __future__ import annotations

import click
import pytest
import typer
from typer.testing import CliRunner

from ksearch.cli import app

runner = CliRunner()
COMMAND = typer.main.get_command(app)


def commands() -> list[list[str]]:
    """Every command's path: ["run"], ["skills", "learn"], ..."""
    paths = []
    for name, command in COMMAND.commands.items():  # type: ignore[attr-defined]
        if isinstance(command, click.Group):
            paths.extend([name, sub] for sub in command.commands)
        else:
            paths.append([name])
    return paths


@pytest.mark.parametrize("path", commands(), ids=" ".join)
def test_every_flag_is_shown_whole_in_80_columns(path):
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    command = COMMAND
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    for param in command.params:
        for flag in [*param.opts, *param.secondary_opts]:
            if flag.startswith("--"):
                assert flag in result.output.split() or f"{flag}," in result.output, (flag, result.output)
    assert "…" not in result.output
    assert all(len(line) <= 80 for line in result.output.splitlines()), result.output


def test_the_demos_flags_and_bracketed_help_read_as_written():
    result = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    text = " ".join(result.output.split())
    for flag in ("--stagnation-window", "--max-attempts-per-cycle", "--max-rounds", "--device", "--model"):
        assert flag in result.output.split()
    assert "Actions explored at once [default: one per GPU in --gpus" in text  # Rich markup ate the bracket
