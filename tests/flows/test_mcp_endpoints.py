"""`ksearch mcp` holds the user's key (issue 61): no tool argument sends it elsewhere, and no task file is imported
into the server's process.

Driven by the MCP SDK's own client over stdio, as a coding agent would, with ``OPENAI_API_KEY`` in the server's
environment. What the key reached is read from listeners the test runs, not from the server's word.
"""

from __future__ import annotations

import asyncio
import http.server
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-ksearchtest-" + "5b2d4f608a1c3e5f7a9b0d2c7f3a9c1e"


class Listener:
    """An HTTP server on the loopback that records the Authorization header of every request and answers 503."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        seen = self.seen

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the standard library's name
                seen.append(self.headers.get("Authorization", ""))
                self.send_response(503)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def server(ws: Path, cwd: Path, base_url: str) -> StdioServerParameters:
    env = {
        "PYTHONPATH": str(REPO),
        "PYTHONUNBUFFERED": "1",
        "OPENAI_API_KEY": KEY,
        "KSEARCH_TRUST_FILE": os.environ["KSEARCH_TRUST_FILE"],
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(cwd),
    }
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "ksearch.cli", "--workspace", str(ws), "mcp", "--base-url", base_url],
        env=env,
        cwd=str(cwd),
    )


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    result = await client.call_tool(tool, arguments, read_timeout_seconds=280)
    assert not result.is_error, f"{tool} failed: {result.content}"
    data = result.structured_content
    return data["result"] if isinstance(data, dict) and set(data) == {"result"} else data


def wait_for(condition: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


@pytest.mark.timeout(600)
def test_the_key_goes_only_to_the_server_the_mcp_server_was_started_with(tmp_path: Path) -> None:
    """``start_run`` takes no ``base_url``: an agent that names its own listener (as a prompt injection would) gets
    nothing; the run's LLM calls go to the server of the launch configuration, with the key."""
    own, agents = Listener(), Listener()
    project = tmp_path / "project"
    project.mkdir()

    async def session() -> None:
        async with Client(server(tmp_path / "ws", project, own.url)) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert "base_url" not in tools["start_run"].input_schema.get("properties", {})
            await client.call_tool(
                "start_run",
                {"task": "softmax", "model": "openai:gpt-x", "device": "cpu", "base_url": agents.url, "wait_s": 1},
                read_timeout_seconds=280,
            )
            assert wait_for(lambda: own.seen, 240), "the run never called its LLM server"

    try:
        asyncio.run(session())
    finally:
        own.close()
        agents.close()
    assert agents.seen == [], agents.seen
    assert any(KEY in header for header in own.seen), own.seen


MARKER_LINE = """import os as _os
try:  # the candidate's worker, sandboxed, cannot write it: the loader and the checker do
    open({marker!r}, "a").write(f"key={{'OPENAI_API_KEY' in _os.environ}} pid={{_os.getpid()}}\\n")
except OSError:
    pass
"""


@pytest.mark.timeout(600)
def test_a_task_file_in_the_servers_folder_is_never_imported_into_the_server(tmp_path: Path) -> None:
    """``eval_file`` on an operator file of the server's folder: the file is imported (its first lines record where,
    wherever they may write) by the loader, the worker and the checker, none of which holds the key; never by the
    server, which does."""
    project, marker = tmp_path / "project", tmp_path / "imports.txt"
    project.mkdir()
    source = (REPO / "examples" / "my_op.py").read_text()
    (project / "op.py").write_text(MARKER_LINE.format(marker=str(marker)) + source)
    shutil.copy(REPO / "tests" / "tasks" / "data" / "my_op_triton.py", project / "kernel.py")

    async def session() -> None:
        async with Client(server(tmp_path / "ws", project, "http://127.0.0.1:9/v1")) as client:
            evaluation = await call(client, "eval_file", task="op.py", path="kernel.py", device="cpu")
            assert evaluation["verdict"] == "passed", evaluation["log"]

    asyncio.run(session())
    imports = marker.read_text().splitlines()
    assert imports and all(line.startswith("key=False") for line in imports), imports
