"""`ksearch mcp` driven by the official MCP SDK's own client over stdio, as a coding agent would: list the tools and
tasks, start an interactive softmax run on the CPU, answer every prompt, steer it, read it back, evaluate a file."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

mcp = pytest.importorskip("mcp")
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from tests.helpers.scripts import WRONG_KERNEL, demo_replies, row_kernel  # noqa: E402

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TOOLS = {"list_tasks", "list_runs", "start_run", "pending", "respond", "steer", "fork_run", "show_run", "eval_file"}


def server(ws: Path) -> StdioServerParameters:
    env = {"PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    if "HOME" in os.environ:
        env["HOME"] = os.environ["HOME"]
    return StdioServerParameters(
        command=sys.executable, args=["-m", "ksearch.cli", "--workspace", str(ws), "mcp"], env=env, cwd=str(REPO)
    )


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    """A tool's structured result; fails the test with the server's message when the tool failed."""
    result = await client.call_tool(tool, arguments, read_timeout_seconds=280)
    assert not result.is_error, f"{tool} failed: {result.content}"
    data = result.structured_content
    return data["result"] if isinstance(data, dict) and set(data) == {"result"} else data


async def error_of(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments, read_timeout_seconds=120)
    assert result.is_error, f"{tool} should have failed: {result.structured_content}"
    return " ".join(getattr(block, "text", "") for block in result.content)


async def agent_session(ws: Path) -> None:
    replies = demo_replies()
    async with Client(server(ws)) as client:
        listed = await client.list_tools()
        assert TOOLS <= {tool.name for tool in listed.tools}

        tasks = await call(client, "list_tasks")
        assert "softmax" in [t["name"] for t in tasks]

        report = await call(
            client,
            "start_run",
            task="softmax",
            model="interactive",
            device="cpu",
            max_rounds=2,
            stagnation_window=2,
            run_id="agent",
            wait_s=240,
        )
        assert report["status"] == "waiting", report
        [first] = report["pending"]
        assert first["prompt"]["key"] == "plan:0:0" and first["prompt"]["role"] == "planner"
        assert first["prompt"]["reply_format"]["json_schema"]

        shown = await call(client, "pending", run_id="agent")
        assert [p["prompt"]["key"] for p in shown["prompts"]] == ["plan:0:0"]

        # Steering from the agent: a typo is an error now; a valid act is queued and shows in the run.
        assert "does not exist" in await error_of(client, "steer", run_id="agent", act="pin", node="no_such_node")
        steered = await call(client, "steer", run_id="agent", act="require-approval", on=False, author="test-agent")
        assert steered["act"] == "require-approval" and "queued" in steered["message"]

        answered = []
        while report["status"] != "finished":
            assert report["status"] == "waiting" and not report.get("error"), report
            [waiting] = report["pending"]
            key = waiting["prompt"]["key"]
            report = await call(client, "respond", run_id="agent", reply=replies[key], wait_s=240)
            assert report["answered"] == key
            answered.append(key)
        assert answered == ["plan:0:0", "write:c1:1", "write:c1:2"]
        assert report["rounds_used"] == 2 and report["pending"] == []

        run = await call(client, "show_run", run_id="agent", with_code=False)
        assert run["run"]["status"] == "finished" and [a["verdict"] for a in run["attempts"]] == ["incorrect", "passed"]
        assert [(a["act"], a["status"], a["author"]) for a in run["steering"]] == [
            ("require-approval", "applied", "test-agent")
        ]
        assert all(c["model"] == "interactive" for c in run["llm_calls"])
        assert "best_code" not in run

        runs = await call(client, "list_runs")
        assert [r["id"] for r in runs] == ["agent"] and runs[0]["status"] == "finished"
        assert "already finished" in await error_of(client, "respond", run_id="agent", reply="x")

        passed = await call(client, "eval_file", task="softmax", code=row_kernel(1), device="cpu")
        assert passed["verdict"] == "passed", passed["summary"]
        wrong = await call(
            client, "eval_file", task="softmax", code=WRONG_KERNEL.format(sleep=0.0, variant=0), device="cpu"
        )
        assert wrong["verdict"] == "incorrect", wrong["summary"]


@pytest.mark.timeout(600)  # every reply starts a `ksearch resume` process: slow on a busy 2-core machine
def test_a_coding_agent_drives_a_search_through_the_mcp_sdk_client(tmp_path):
    asyncio.run(agent_session(tmp_path / "ws"))
