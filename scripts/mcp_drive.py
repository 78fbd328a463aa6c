"""Drive a ``--model interactive`` run through ksearch's MCP server, as a coding agent does, from reply files.

    python scripts/mcp_drive.py WORKSPACE REPLIES OUT --run-id RUN [--prompts-only] [-- task=TASK KEY=VALUE ...]

The same loop as ``scripts/interactive_drive.py`` (reply files named by round and role, ``r01-planner.md``,
``r01-coder.md``, ..., or by call key; prompts saved to ``OUT/prompts``; ``drive.json``, ``trajectory.md`` and
``replies.jsonl`` written), but every step goes through the MCP server's tools over stdio with the official MCP SDK's
client: ``start_run`` (when RUN is new; the ``KEY=VALUE`` pairs after ``--`` are its arguments, values read as JSON
where they parse: ``task=trimul device=cuda max_rounds=24 parallel=2``), ``pending``, ``respond``, ``steer`` (a
promotion's approval) and ``resume_run``. So the replies go in the way a coding agent's do.

On a machine without the run's GPU, ``--prompts-only`` serves with ``ksearch mcp --prompts-only``: the run plans and
writes here and the script stops where kernels wait for the GPU. On the GPU machine the script (without the flag)
calls ``resume_run``, which evaluates them and drives the run to its next prompts. A campaign alternates the two,
carrying the workspace database between machines (``--save-db``), as ``interactive_drive.py``'s docstring describes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import interactive_drive as drive  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from ksearch.llm.interactive import Waiting  # noqa: E402

VIA = "scripts/mcp_drive.py, through ksearch's MCP server (pending, respond, steer, resume_run)"
TOOL_WAIT_S = 3000.0
"""How long a tool that drives the run waits for it to pause (a GPU call evaluates kernels for minutes)."""


class ToolFailed(RuntimeError):
    """A tool answered with an error: its message (the server's, with the hint)."""


def server(workspace: Path, prompts_only: bool) -> StdioServerParameters:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    args = ["-m", "ksearch.cli", "--workspace", str(workspace), "mcp", *(["--prompts-only"] if prompts_only else [])]
    return StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(REPO))


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    """A tool's structured result; ``ToolFailed`` with the server's message when the tool failed."""
    result = await client.call_tool(tool, arguments, read_timeout_seconds=TOOL_WAIT_S + 120)
    if result.is_error:
        raise ToolFailed(f"{tool}: " + " ".join(getattr(block, "text", "") for block in result.content))
    data = result.structured_content
    return data["result"] if isinstance(data, dict) and set(data) == {"result"} else data


def start_arguments(pairs: list[str], run_id: str) -> dict[str, Any]:
    """``start_run``'s arguments from ``KEY=VALUE`` pairs (a value is JSON where it parses, else the text)."""
    arguments: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"start_run arguments are KEY=VALUE pairs, got {pair!r}")
        try:
            arguments[key] = json.loads(text)
        except json.JSONDecodeError:
            arguments[key] = text
    if "task" not in arguments:
        raise SystemExit(f"run {run_id} is new: give at least task=TASK after `--` to start it")
    return {**arguments, "model": "interactive", "run_id": run_id, "wait_s": TOOL_WAIT_S}


async def answer(
    client: Client, run_id: str, workspace: Path, replies: Path, out: Path, prompts_only: bool
) -> tuple[str, list[str]]:
    """One step, as ``interactive_drive.answer``: answer every open prompt that has a reply file, through the tools.

    Returns ``(state, missing)``: ``answered`` (step again), ``finished``, ``waiting`` (reply files missing),
    ``device`` (with ``prompts_only``: kernels wait for the GPU) or ``stuck`` (driving changed nothing)."""
    view = await call(client, "pending", run_id=run_id)
    if view["status"] == "finished":
        return "finished", []
    prompts = [Waiting.model_validate(p) for p in view["prompts"]]
    devices = [w for w in prompts if w.prompt.kind == "device"]
    open_prompts = [w for w in prompts if not w.answered and w.prompt.kind != "device"]
    if not open_prompts:
        if devices and prompts_only:
            return "device", []
        before = (view["status"], [w.prompt.key for w in prompts])
        after = await call(client, "resume_run", run_id=run_id, wait_s=TOOL_WAIT_S)
        if after.get("error"):
            raise ToolFailed(f"the run failed: {after['error']}")
        now = await call(client, "pending", run_id=run_id)
        if (now["status"], sorted(p["prompt"]["key"] for p in now["prompts"])) == before and not after["driving"]:
            return "stuck", []
        return "answered", []
    round_no = drive.next_round(run_id, workspace)
    missing, given = [], 0
    for waiting, names in zip(open_prompts, drive.prompt_names(open_prompts, round_no), strict=True):
        saved = drive.save_prompt(out, names[0], waiting)
        found = drive.reply_file(replies, names)
        if found is None:
            print(
                f"waiting for {waiting.prompt.key}: prompt saved to {saved}; write the reply as {replies / names[0]}.md"
            )
            missing.append(names[0])
            continue
        text = found.read_text(encoding="utf-8")
        print(f"answering {waiting.prompt.key} with {found.name} (MCP)", flush=True)
        last = waiting is open_prompts[-1]
        if waiting.prompt.kind == "approval":
            decision = drive.approval_decision(found, text)
            node = waiting.prompt.details.get("node_id")
            wait_s = TOOL_WAIT_S if last else 0.0  # the server drives once every answer of the step is in
            await call(client, "steer", run_id=run_id, act=decision, node=node, author="mcp_drive", wait_s=wait_s)
        else:
            wait_s = TOOL_WAIT_S if last else 0.0
            await call(client, "respond", run_id=run_id, reply=text, key=waiting.prompt.key, wait_s=wait_s)
        given += 1
    if not given:
        return "waiting", missing
    return "answered", []


async def session(args: argparse.Namespace, start_pairs: list[str]) -> tuple[str, list[str], str | None]:
    workspace, out, replies = args.workspace.resolve(), args.out.resolve(), args.replies.resolve()
    state, missing, error = "answered", [], None
    async with Client(server(workspace, args.prompts_only)) as client:
        try:
            runs = await call(client, "list_runs")
            if args.run_id not in [r["id"] for r in runs]:
                print(f"starting {args.run_id} through MCP start_run", flush=True)
                await call(client, "start_run", **start_arguments(start_pairs, args.run_id))
            for _ in range(args.max_answers):
                state, missing = await answer(client, args.run_id, workspace, replies, out, args.prompts_only)
                if state != "answered":
                    break
            if state == "stuck":
                error = "driving the run changed nothing: see its driver log under WORKSPACE/logs"
        except ToolFailed as exc:  # the run stays resumable: running this command again resumes it
            state, error = "error", str(exc)
        await wait_for_driver(client, args.run_id)
    return state, missing, error


async def wait_for_driver(client: Client, run_id: str) -> None:
    """A reply given without waiting (a step cut short by an error) may leave the server's driver running, and it
    outlives the server: let it pause before the database is copied."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TOOL_WAIT_S
    with contextlib.suppress(ToolFailed):
        while loop.time() < deadline:
            runs = await call(client, "list_runs")
            if all(r["status"] != "running" for r in runs if r["id"] == run_id):
                return
            await asyncio.sleep(2.0)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    start_pairs = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    args = drive.arguments(
        __doc__.split("\n\n")[0],
        "on a machine without the run's GPU: the server plans and writes here and the script stops where "
        "kernels wait for the GPU (run it again there without this flag)",
    ).parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    state, missing, error = asyncio.run(session(args, start_pairs))
    if error:
        print(f"error: {error}", file=sys.stderr)
    return drive.finish(args, state, missing, error, via=VIA)


if __name__ == "__main__":
    sys.exit(main())
