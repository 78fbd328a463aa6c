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


def test_a_gpus_missing_pid_namespace_is_by_design_and_not_said(monkeypatch: pytest.MonkeyPatch) -> None:
    """``pidns`` is left out on every GPU (CUDA IPC): not a refusal of this machine, so not said; a GPU whose machine
    refuses Landlock is."""
    said: list[str] = []
    monkeypatch.setenv("KSEARCH_SANDBOX", "auto")
    monkeypatch.setattr(policy, "_noticed", set())
    monkeypatch.setattr(policy, "_notice_sink", said.append)
    monkeypatch.setattr(policy, "gpu_withheld", dict)
    full = ("limits", "userns", "mountns", "netns", "ipcns", "caps", "landlock", "seccomp")
    monkeypatch.setattr(policy, "_probed", {True: (full, dict(policy.GPU_REFUSED))})
    assert "pidns" in policy.record("cuda:0")["sandbox_missing"] and said == []
    no_landlock = tuple(layer for layer in full if layer != "landlock")
    monkeypatch.setattr(policy, "_probed", {True: (no_landlock, {**policy.GPU_REFUSED, "landlock": "ABI 0 (a test)"})})
    policy.record("cuda:0")
    assert len(said) == 1 and "landlock: ABI 0 (a test)" in said[0] and "pidns" not in said[0], said
