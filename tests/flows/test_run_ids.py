"""A run id is never reused (issue 64): `run`, `fork`, `replay` and MCP's `start_run` refuse an id the workspace
holds, say what to do instead (resume, fork, another id), and leave the workspace's database exactly as it was.
Before, `run OTHER --run-id x1` drove the finished x1 again (0 rounds) and `fork RUN --at 2 --run-id g4` cleared the
finished g4's best kernel and rounds."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ksearch.agent.config import RunConfig
from ksearch.cli import app
from ksearch.errors import RunExistsError
from ksearch.flows import run as runner
from ksearch.store import Store
from tests.fakes import FakeExecutor

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fake_executor")]  # the runs it refuses never evaluate

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "softmax-demo.jsonl"
cli = CliRunner()


def dump(ws: Path) -> list[str]:
    """Every row of every table of the workspace's database (LangGraph's checkpoints included)."""
    conn = sqlite3.connect(ws / "ksearch.db")
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace with a finished run x1 that has a best kernel, and a run w1 waiting for its first reply."""
    ws = tmp_path_factory.mktemp("made") / "ws"
    finished = RunConfig(
        run_id="x1", task="softmax", model=f"replay:{DEMO}", device="cpu", max_rounds=6, stagnation_window=2
    )
    fake = FakeExecutor()  # what is tested is the refusal of a taken id, not the runs' evaluations
    assert runner.start_run(finished, workspace=ws, executor=fake).best is not None
    waiting = RunConfig(run_id="w1", task="softmax", model="interactive", device="cpu", max_rounds=4)
    assert runner.start_run(waiting, workspace=ws, executor=fake).status == "waiting"
    return ws


@pytest.fixture
def ws(made: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "ws"
    shutil.copytree(made, copy)
    return copy


def invoke(ws: Path, *args: str):
    return cli.invoke(app, ["--workspace", str(ws), *args])


def refused(result, run_id: str) -> str:
    """The refusal's text (message and hint), after checking that it is one."""
    assert isinstance(result.exception, RunExistsError), result.output
    text = f"{result.exception} {result.exception.hint}"
    assert f"run {run_id} already exists" in text and "another run id" in text
    return text


def test_run_with_a_taken_id_is_refused_and_the_old_run_is_untouched(ws):
    before = dump(ws)
    result = invoke(ws, "run", "trimul", "--model", f"replay:{DEMO}", "--device", "cpu", "--run-id", "x1")
    text = refused(result, "x1")
    assert "ksearch fork x1 --at ROUND" in text and "resume" not in text  # x1 finished: nothing to resume
    assert "run x1:" not in result.output  # no banner of a run that does not start
    assert dump(ws) == before


def test_run_onto_an_unfinished_run_says_resume(ws):
    before = dump(ws)
    result = invoke(ws, "run", "softmax", "--model", "interactive", "--device", "cpu", "--run-id", "w1")
    assert "ksearch resume w1" in refused(result, "w1")
    assert dump(ws) == before


@pytest.mark.parametrize("onto", ["x1", "w1"])
def test_fork_onto_a_taken_id_is_refused_and_changes_nothing(ws, onto):
    before = dump(ws)
    result = invoke(ws, "fork", "x1", "--at", "2", "--run-id", onto)
    refused(result, onto)
    assert "forked" not in result.output
    assert dump(ws) == before


def test_replay_onto_a_taken_id_is_refused_and_changes_nothing(ws):
    before = dump(ws)
    result = invoke(ws, "replay", "x1", "--run-id", "w1")
    refused(result, "w1")
    assert "replaying" not in result.output
    assert dump(ws) == before


def test_mcp_start_run_with_a_taken_id_is_an_error_not_the_old_result(ws, monkeypatch):
    pytest.importorskip("mcp")
    from mcp import Client

    from ksearch.flows.mcp import build_server

    monkeypatch.chdir(REPO)
    before = dump(ws)

    async def start() -> str:
        async with Client(build_server(ws)) as client:
            result = await client.call_tool("start_run", {"task": "softmax", "device": "cpu", "run_id": "x1"})
            assert result.is_error, result.structured_content
            return " ".join(getattr(block, "text", "") for block in result.content)

    text = asyncio.run(start())
    assert "run x1 already exists" in text and "another run id" in text
    assert dump(ws) == before


def test_the_store_refuses_a_second_row_of_one_id(tmp_path):
    store = Store(tmp_path / "ksearch.db")
    try:
        store.create_run({"id": "r1", "task": "softmax", "model": "m", "language": "triton", "device": "cpu"})
        with pytest.raises(RunExistsError):
            store.create_run({"id": "r1", "task": "trimul", "model": "n", "language": "triton", "device": "cuda"})
        row = store.get_run("r1")
        assert (row["task"], row["model"], row["device"]) == ("softmax", "m", "cpu")
    finally:
        store.close()
