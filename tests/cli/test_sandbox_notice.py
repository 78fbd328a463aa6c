"""Layers of the sandbox this machine refuses are said once on the console (issue 61), not only in ``--json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ksearch.cli import app
from ksearch.tools.containment import policy
from tests.helpers.scripts import row_kernel

REFUSED = "user namespaces are not allowed here (a test)"


def test_missing_layers_are_said_once_on_the_console(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine as one that refuses user namespaces (only the layers that need none are left): the first
    evaluation says so on stderr beside its "passed"; a second one in the same process says nothing more."""
    monkeypatch.setenv("KSEARCH_SANDBOX", "auto")
    monkeypatch.setattr(policy, "_probed", {False: (("limits", "caps"), {"userns": REFUSED})})
    monkeypatch.setattr(policy, "_noticed", set())
    monkeypatch.setattr(policy, "_notice_sink", None)
    kernel = tmp_path / "kernel.py"
    kernel.write_text(row_kernel(1))
    runner = CliRunner()
    first = runner.invoke(app, ["eval", "softmax", str(kernel), "--device", "cpu"])
    assert first.exit_code == 0 and "passed" in first.stdout, first.output
    assert first.stderr.count(REFUSED) == 1 and "without part of the sandbox" in first.stderr, first.stderr
    second = runner.invoke(app, ["eval", "softmax", str(kernel), "--device", "cpu", "--json"])
    assert second.exit_code == 0, second.output
    assert REFUSED in json.loads(second.stdout)["environment"]["sandbox_missing"]
    assert REFUSED not in second.stderr
