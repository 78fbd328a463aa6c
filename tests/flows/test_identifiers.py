"""Run ids and the files named after them or by an agent (issue 37): one safe pattern everywhere an id is accepted,
file names from sanitised ids that never overwrite unasked, and an MCP server that reads only where it was started."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from ksearch.agent.config import RunConfig
from ksearch.contracts.identifiers import check_run_id, file_stem
from ksearch.errors import UserError
from ksearch.flows import report as report_flow
from ksearch.store import Store

REPO = Path(__file__).resolve().parents[2]
BAD_IDS = ["z/../../victim", "../../../x/y", "x;rm -rf ~", "-rf", ".hidden", "a b", "", "x" * 129]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_unsafe_run_ids_are_refused_by_the_config_and_the_store(bad: str, tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="not allowed"):
        RunConfig(run_id=bad, task="softmax", model="interactive")
    store = Store(tmp_path / "ksearch.db")
    try:
        with pytest.raises(UserError, match="not allowed"):
            store.create_run({"id": bad, "task": "softmax", "model": "m", "language": "triton", "device": "cpu"})
    finally:
        store.close()


def test_generated_and_usual_ids_pass() -> None:
    from ksearch.flows.run_config import new_run_id

    for good in (new_run_id("softmax"), new_run_id("/abs/my op.py"), "mine", "kb-l1-p19", "run.2"):
        assert check_run_id(good) == good


def test_the_cli_refuses_a_path_as_run_id(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ksearch.cli",
            "--workspace",
            str(tmp_path / "ws"),
            "run",
            "softmax",
            "--model",
            "interactive",
            "--device",
            "cpu",
            "--run-id",
            "z/../../victim",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**__import__("os").environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode != 0 and "not allowed" in done.stdout + done.stderr
    assert not (tmp_path / "victim").exists() and not list((tmp_path / "ws").glob("**/*victim*"))


def test_default_report_names_stay_in_the_folder_and_never_overwrite_unasked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stored id from someone else's workspace (written there by hand) cannot steer where a report lands."""
    assert file_stem("z/../../victim") == "z_.._.._victim" and "/" not in str(report_flow.default_output(["../../v"]))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(
        report_flow, "render_pages", lambda run_ids, workspace=None: ("<html>new</html>", ["z/../../victim"])
    )
    path = report_flow.write_report(["z"])
    assert path.resolve().parent == tmp_path.resolve()
    path.write_text("mine")
    with pytest.raises(UserError, match="exists"):
        report_flow.write_report(["z"])
    assert path.read_text() == "mine"
    assert report_flow.write_report(["z"], force=True).read_text() == "<html>new</html>"


def test_the_mcp_server_reads_files_only_under_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mcp")
    from ksearch.flows import mcp

    project, elsewhere, ws = tmp_path / "project", tmp_path / "elsewhere", tmp_path / "project" / ".ksearch"
    for folder in (project, elsewhere, ws):
        folder.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(project)
    monkeypatch.delenv(mcp.ROOTS_VARIABLE, raising=False)
    assert mcp.confined_file("kernel.py", "kernel file", ws) == project.resolve() / "kernel.py"
    for outside in (str(elsewhere / "op.py"), "../elsewhere/op.py", "/etc/passwd", str(ws / "evil.py")):
        with pytest.raises(ValueError, match="outside the folders"):
            mcp.confined_file(outside, "kernel file", ws.resolve())
    with pytest.raises(ValueError, match="task file"):
        mcp.confined_task(str(elsewhere / "op.py"), ws.resolve())
    assert (
        mcp.confined_task("softmax", ws) == "softmax"
        and mcp.confined_task("kernelbench:1/19", ws) == "kernelbench:1/19"
    )
    monkeypatch.setenv(mcp.ROOTS_VARIABLE, str(elsewhere))
    assert mcp.confined_file(str(elsewhere / "op.py"), "task file", ws) == elsewhere.resolve() / "op.py"
    assert mcp.BackgroundDrivers(ws).log_path("../../../x/y").parent == ws / "logs"
