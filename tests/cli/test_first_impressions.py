"""What a new user meets first: whole run ids, unique prefixes, the latest run by default, the task names to type,
and a workspace database that is not one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ksearch.cli import app
from ksearch.cli.inspect import fit_columns
from ksearch.errors import RunNotFoundError, WorkspaceError
from ksearch.flows.workspace import DB_NAME
from ksearch.store import Store
from ksearch.tasks import registry
from ksearch.tasks.flashinfer import definitions as fi_defs

runner = CliRunner()

LONG_ID = "softmax-20261123-101500-a1b2"
OTHER_ID = "softmax-20261123-101500-c3d4"
NEWEST_ID = "trimul-20261124-090000-e5f6"


def _workspace_with_runs(ws: Path) -> Path:
    store = Store(ws / DB_NAME)
    try:
        for i, (run_id, status) in enumerate(
            ((LONG_ID, "finished"), (OTHER_ID, "interrupted"), (NEWEST_ID, "finished"))
        ):
            model = "openai:a-model-name-that-is-very-long-indeed-and-goes-on-and-on"
            store.create_run(
                {
                    "id": run_id,
                    "task": run_id.split("-")[0],
                    "model": model,
                    "language": "triton",
                    "device": "cpu",
                    "status": status,
                    "config": {},
                    "created_at": time.time() + i,
                }
            )
    finally:
        store.close()
    return ws


@pytest.fixture
def narrow_terminal(monkeypatch):
    from ksearch.cli._common import out

    monkeypatch.setattr(out, "width", 60)


def test_runs_prints_every_id_whole_even_in_a_narrow_terminal(tmp_path, narrow_terminal):
    ws = _workspace_with_runs(tmp_path / "ws")
    result = runner.invoke(app, ["--workspace", str(ws), "runs"])
    assert result.exit_code == 0, result.output
    for run_id in (LONG_ID, OTHER_ID, NEWEST_ID):
        assert run_id in result.output.split(), result.output


def test_fit_columns_cuts_free_text_first_and_never_the_id():
    rows = [["x" * 30, "finished", "a" * 40]]
    lines = fit_columns(["run", "status", "model"], rows, 55, shrinkable=("model",))
    assert all(len(line) <= 55 for line in lines)
    assert "x" * 30 in lines[1] and lines[1].endswith("...")
    lines = fit_columns(["run", "status", "model"], rows, 30, shrinkable=("model",))
    assert "x" * 30 in lines[1] and "MODEL" not in lines[0]  # no room even for 10 characters: the column goes


def test_a_unique_prefix_names_a_run_and_an_ambiguous_one_lists_the_candidates(tmp_path):
    ws = _workspace_with_runs(tmp_path / "ws")
    result = runner.invoke(app, ["--workspace", str(ws), "show", "trimul", "--json"])
    assert result.exit_code == 0, result.output
    assert NEWEST_ID in result.output
    result = runner.invoke(app, ["--workspace", str(ws), "show", "softmax-2026"])
    assert isinstance(result.exception, RunNotFoundError)
    assert (
        "ambiguous" in str(result.exception) and LONG_ID in str(result.exception) and OTHER_ID in str(result.exception)
    )


def test_prefix_is_literal_not_a_like_pattern(tmp_path):
    ws = _workspace_with_runs(tmp_path / "ws")
    result = runner.invoke(app, ["--workspace", str(ws), "show", "softmax_2026"])  # '_' was a LIKE wildcard
    assert result.exit_code == 1


def test_without_run_the_latest_is_taken_and_said(tmp_path):
    ws = _workspace_with_runs(tmp_path / "ws")
    result = runner.invoke(app, ["--workspace", str(ws), "show"])
    assert result.exit_code == 0, result.output
    assert f"using the latest run: {NEWEST_ID}" in result.output  # on stderr: CliRunner mixes them
    assert f"{NEWEST_ID}: task trimul" in result.output


def test_resume_without_run_takes_the_latest_unfinished_one(tmp_path):
    from ksearch.cli._common import pick_run

    ws = _workspace_with_runs(tmp_path / "ws")

    class Ctx:
        obj = {"workspace": ws}

    assert pick_run(Ctx(), None, unfinished=True) == OTHER_ID  # type: ignore[arg-type]
    assert pick_run(Ctx(), "softmax-20261123-101500-a", unfinished=True) == LONG_ID  # type: ignore[arg-type]


def test_no_run_at_all_says_how_to_start_one(tmp_path):
    result = runner.invoke(app, ["--workspace", str(tmp_path / "empty"), "show"])
    assert isinstance(result.exception, RunNotFoundError)
    assert "no run in" in str(result.exception) and "ksearch run TASK" in result.exception.hint


def test_tasks_lists_the_builtin_flashinfer_definitions_by_name():
    infos = {i.name: i for i in registry.list_tasks()}
    for name in fi_defs.BUILTIN_DEFINITIONS:
        assert f"flashinfer:{name}" in infos
    result = runner.invoke(app, ["tasks"])
    assert result.exit_code == 0
    for name in fi_defs.BUILTIN_DEFINITIONS:
        assert f"flashinfer:{name}" in result.output.split()


def test_tasks_says_how_to_install_flashinfer_bench_when_it_is_missing(monkeypatch):
    def missing() -> None:
        raise registry.UserError("flashinfer-bench is not importable (No module named 'flashinfer_bench')")

    monkeypatch.setattr(fi_defs, "fib", missing)
    infos = [i for i in registry.list_tasks() if i.name.startswith("flashinfer:") and "@" not in i.name]
    assert len(infos) == len(fi_defs.BUILTIN_DEFINITIONS)
    assert all(not i.available and fi_defs.INSTALL_HINT in i.hint for i in infos)
    result = runner.invoke(app, ["tasks"])
    assert "not installed" in result.output and "pip install --no-deps flashinfer-bench" in result.output


NOT_A_DATABASE = {
    "text": b"this is a text file, not a database\n" * 40,
    "damaged header": b"SQLite format 3\x00" + b"\x07" * 84,
}


def _truncated_workspace_database(tmp_path: Path) -> bytes:
    """A real workspace database with runs in it, cut to its first half (a copy interrupted, a disk error)."""
    real = _workspace_with_runs(tmp_path / "real") / DB_NAME
    data = real.read_bytes()
    return data[: len(data) // 2]


@pytest.mark.parametrize("kind", [*NOT_A_DATABASE, "truncated"])
def test_a_database_that_is_not_one_is_a_clear_error_and_is_left_untouched(tmp_path, kind):
    content = NOT_A_DATABASE[kind] if kind in NOT_A_DATABASE else _truncated_workspace_database(tmp_path)
    ws = tmp_path / "ws"
    ws.mkdir()
    db = ws / DB_NAME
    db.write_bytes(content)
    for args in (["runs"], ["show"], ["resume"], ["run", "softmax", "--model", "replay:x.jsonl", "--device", "cpu"]):
        result = runner.invoke(app, ["--workspace", str(ws), *args])
        assert isinstance(result.exception, WorkspaceError), (args, result.output, result.exception)
        assert str(db) in str(result.exception) and "left untouched" in str(result.exception)
        assert f"mv {db} {db}.bad" in result.exception.hint
    assert db.read_bytes() == content
    assert sorted(p.name for p in ws.iterdir() if p.name != "logs") == [DB_NAME]


def test_the_user_sees_one_line_and_a_hint(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / DB_NAME).write_bytes(NOT_A_DATABASE["text"])
    proc = subprocess.run(
        [sys.executable, "-m", "ksearch.cli", "--workspace", str(ws), "runs"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "300"},
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("error:") and lines[1].startswith("hint: move it aside"), lines
