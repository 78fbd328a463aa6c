"""The MCP server (``ksearch mcp``): what a coding agent needs to run and steer searches, over stdio.

Built on the official ``mcp`` Python SDK (``MCPServer``, formerly FastMCP; ``pip install 'ksearch[mcp]'``). Every
tool calls the same flows as the CLI. Tools that move a run on (``start_run``, ``respond``, ``steer`` approvals,
``fork_run``) record what they must, then drive the run in a background ``ksearch resume RUN`` process and wait for
it at most ``wait_s`` seconds: with ``--model interactive`` the run pauses within seconds at its next prompt, which
the tool returns; with a real model the run goes on in the background (its output in
``WORKSPACE/logs/RUN.driver.log``) and the agent polls ``pending`` or ``show_run``. The server itself never runs a
graph or a kernel, so it stays responsive and its stdout carries nothing but the protocol.

Trust: an MCP client is an agent that a prompt may have steered, and the server often holds the user's API key in
its environment, out of the agent's sight. So no tool argument names where the key goes: the LLM server is the
server's own launch configuration (``ksearch mcp --base-url URL``, or ``OPENAI_BASE_URL``), and runs evaluate on
this machine (no Dask scheduler). Kernel and task files are read only under the server's folder (``confined_file``),
and a task file is loaded in a process without the key (``ksearch.tasks.keyless``), never imported into the server.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from ksearch import settings
from ksearch.agent.config import BudgetConfig
from ksearch.contracts.identifiers import file_stem
from ksearch.errors import KsearchError
from ksearch.flows import fork as fork_flow
from ksearch.flows import inspect as inspect_flow
from ksearch.flows import interactive as interactive_flow
from ksearch.flows import run as run_flow
from ksearch.flows import steering as steering_flow
from ksearch.flows.evaluate import evaluate_file
from ksearch.flows.placement import placement
from ksearch.flows.run_config import run_config
from ksearch.flows.workspace import workspace_dir

INSTRUCTIONS = """ksearch searches for fast, correct GPU kernels with an LLM in the loop. With model "interactive" YOU
are the LLM: start_run returns the first prompt; answer each with respond (a JSON edit script for planner prompts, a
complete Python module for coder prompts, as each prompt's reply_format says) until the run finishes. steer pins,
prunes, revives or adds hypotheses; show_run shows the tree and every round; eval_file checks a kernel on its own;
resume_run drives a run that waits for its GPU, stopped or crashed."""


class BackgroundDrivers:
    """One ``ksearch resume RUN`` process per run at a time; the caller waits for it to pause or end, or not.
    ``prompts_only``: this machine lacks the runs' GPU, so each drives with ``--prompts-only`` (plans and kernels
    are written here; evaluations wait for a server on the GPU machine)."""

    def __init__(self, workspace: Path, *, prompts_only: bool = False) -> None:
        self.workspace = workspace.resolve()
        self.prompts_only = prompts_only
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()

    def log_path(self, run_id: str) -> Path:
        return self.workspace / "logs" / f"{file_stem(run_id)}.driver.log"

    def start(self, run_id: str, *, base_url: str | None = None) -> None:
        """Drive ``run_id`` in the background, unless this server already does (that process takes new answers);
        ``base_url``: the LLM server of the server's launch configuration (a stored one the user has not vouched for
        is not used unasked)."""
        with self._lock:
            proc = self._procs.get(run_id)
            if proc is not None and proc.poll() is None:
                return
            log = self.log_path(run_id)
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("ab") as sink:
                self._procs[run_id] = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "ksearch.cli",
                        "--workspace",
                        str(self.workspace),
                        "resume",
                        run_id,
                        *(["--base-url", base_url] if base_url else []),
                        *(["--prompts-only"] if self.prompts_only else []),
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # a run outlives the agent's session; it stops itself when it pauses
                    env={**os.environ, "PYTHONUNBUFFERED": "1"},
                )

    def wait(self, run_id: str, wait_s: float) -> dict[str, Any]:
        """Wait up to ``wait_s`` for the driver to stop (the run paused or ended); then report the run."""
        deadline = time.monotonic() + max(0.0, wait_s)
        while True:
            proc = self._procs.get(run_id)
            if proc is None or proc.poll() is not None:
                view = interactive_flow.pending(run_id, workspace=self.workspace)
                if any(w.answered for w in view.prompts) and time.monotonic() < deadline:
                    self.start(run_id)  # an answer arrived as the driver let go: drive again
                    continue
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        return self.report(run_id)

    def report(self, run_id: str) -> dict[str, Any]:
        row = inspect_flow.run_row(run_id, self.workspace)
        proc = self._procs.get(run_id)
        view = interactive_flow.pending(row["id"], workspace=self.workspace)
        report: dict[str, Any] = {
            "run_id": row["id"],
            "status": row["status"],
            "driving": proc is not None and proc.poll() is None,
            "rounds_used": row["rounds_used"],
            "done_reason": row["done_reason"],
            "best_score": row["best_score"],
            "best_candidate_id": row["best_candidate_id"],
            "error": row["error"],
            "pending": [w.model_dump(mode="json") for w in view.prompts if not w.answered],
            "waits_for_device": any(w.prompt.kind == "device" for w in view.prompts),
        }
        if proc is not None and proc.poll() not in (None, 0):
            report["driver_log_tail"] = _tail(self.log_path(row["id"]))
        return report


def _tail(path: Path, limit: int = 3000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-limit:]
    except OSError:
        return ""


F = TypeVar("F", bound=Callable[..., Any])


def reported(fn: F) -> F:
    """Turn our expected failures into the tool's error message (with the hint), which the agent reads; the SDK
    hides any other exception's message as a crash."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (KsearchError, KeyError, ValueError) as exc:
            hint = getattr(exc, "hint", "")
            raise ToolError(f"{exc}" + (f" (hint: {hint})" if hint else "")) from exc

    return wrapper  # type: ignore[return-value]


ROOTS_VARIABLE = settings.MCP_ROOTS.name
"""More folders (``:``-separated) from which the server may read kernel and task files, besides its working
directory."""


def allowed_roots() -> list[Path]:
    """Where the server reads files an agent names: its working directory, and ``KSEARCH_MCP_ROOTS``."""
    extra = settings.MCP_ROOTS.paths()
    return [Path.cwd().resolve(), *(p.resolve() for p in extra)]


def confined_file(name: str, what: str, workspace: Path) -> Path:
    """``name`` resolved, when it lies under an allowed root and outside the workspace; ValueError otherwise. A
    task file is imported into this server's process, so it must come from a folder the user chose, never from
    anywhere an agent points (nor from the workspace, which may have come from someone else)."""
    path = Path(name).expanduser()
    path = (path if path.is_absolute() else Path.cwd() / path).resolve()
    if path.is_relative_to(workspace) or not any(path.is_relative_to(root) for root in allowed_roots()):
        roots = ", ".join(str(r) for r in allowed_roots())
        raise ValueError(
            f"{what} {name!r} is outside the folders this server reads ({roots}); "
            f"start `ksearch mcp` in the project folder, or add the folder to {ROOTS_VARIABLE}"
        )
    return path


def confined_task(task: str, workspace: Path) -> str:
    """A task name whose file, if it names one (``op.py``, ``kernelbench:path.py``), is confined like a kernel file."""
    prefix = "kernelbench:" if task.startswith("kernelbench:") else ""
    name = task.removeprefix(prefix)
    if name.endswith(".py") or ("/" in name and not name.replace("/", "").isdigit()):
        return prefix + str(confined_file(name, "task file", workspace))
    return task


def build_server(
    workspace: Path | None = None, *, base_url: str | None = None, prompts_only: bool = False
) -> MCPServer:
    """The server with its tools, on ``workspace`` (``--workspace``, ``$KSEARCH_WORKSPACE`` or ``./.ksearch``);
    ``base_url``: the OpenAI-compatible server its runs use (the launch configuration's, never a tool's);
    ``prompts_only``: this machine lacks the runs' GPU (``ksearch mcp --prompts-only``): runs plan and write here and
    stop where kernels wait for the GPU, where a server without the flag (``resume_run``) evaluates them."""
    ws = workspace_dir(workspace).resolve()
    drivers = BackgroundDrivers(ws, prompts_only=prompts_only)
    server: MCPServer = MCPServer("ksearch", instructions=INSTRUCTIONS)

    def tool(fn: F) -> F:
        server.tool()(reported(fn))
        return fn

    @tool
    def list_tasks() -> list[dict[str, Any]]:
        """The tasks a run can search (built in, and registered by installed packages)."""
        return [info.model_dump() for info in inspect_flow.list_tasks()]

    @tool
    def list_runs() -> list[dict[str, Any]]:
        """The workspace's runs, newest first, with status, rounds and best score."""
        keep = ("id", "task", "model", "device", "status", "rounds_used", "best_score", "done_reason", "parent_run_id")
        return [{k: r.get(k) for k in keep} for r in inspect_flow.list_runs(ws)]

    @tool
    def start_run(
        task: str,
        model: str = "interactive",
        device: str = "auto",
        max_rounds: int = 20,
        stagnation_window: int = 5,
        parallel: int | None = None,
        language: str = "triton",
        seed_from: str | None = None,
        require_approval: bool = False,
        max_tokens: int | None = None,
        max_attempts_per_cycle: int | None = None,
        explore_every: int = 4,
        compete: list[str] | None = None,
        run_id: str | None = None,
        wait_s: float = 60.0,
    ) -> dict[str, Any]:
        """Start a search. model "interactive" makes you answer every LLM call (returns the first prompt); a
        provider:model runs in the background (poll pending/show_run) against the LLM server this MCP server was
        started with. device: auto, cuda, cuda:N or cpu; parallel: actions explored at once (default: one per GPU,
        1 on cpu); explore_every: every Nth cycle explores the least-tried family (0 never); compete: files of the
        best known competing kernels (.py) or their per-shape times (.json, .toml), shown to the planner."""
        if drivers.prompts_only:
            raise ToolError(
                "this server plans and writes only (ksearch mcp --prompts-only): a new run evaluates its seed, so "
                "start it with a server on the machine that has its GPU, then answer its prompts here"
            )
        chosen, parallel = placement(device, parallel)
        task = confined_task(task, ws)
        seed_from = str(confined_file(seed_from, "seed file", ws)) if seed_from else None
        competing = [str(confined_file(name, "competing kernel file", ws).resolve()) for name in compete or []]
        config = run_config(
            inspect_flow.canonical_task(task, None, chosen),
            model,
            run_id=run_id,
            named_after=task,
            language=language,
            base_url=base_url,
            device=chosen,
            max_rounds=max_rounds,
            stagnation_window=stagnation_window,
            parallel_cycles=parallel,
            seed_from=str(Path(seed_from).resolve()) if seed_from else None,
            require_approval=require_approval,
            budget=BudgetConfig(max_total_tokens=max_tokens),
            max_attempts_per_cycle=max_attempts_per_cycle,
            explore_every=explore_every,
            compete=competing,
        )
        created = run_flow.create_run(config, workspace=ws)  # vouched for: the launch configuration's endpoint
        drivers.start(created.run_id, base_url=base_url)
        return drivers.wait(created.run_id, wait_s)

    @tool
    def pending(run_id: str) -> dict[str, Any]:
        """What a run waits for: each prompt's key, role, full text (system and user) and expected reply format."""
        return interactive_flow.pending(run_id, workspace=ws).as_json()

    @tool
    def respond(run_id: str, reply: str, key: str | None = None, wait_s: float = 60.0) -> dict[str, Any]:
        """Answer the run's pending prompt (key: which one, when several wait), then let the run go on to its next
        prompt or its end. The reply is recorded before anything else, so it is never lost."""
        response = interactive_flow.respond(run_id, reply, key=key, workspace=ws, drive=False)
        drivers.start(response.run_id)
        return {"answered": response.key, **drivers.wait(response.run_id, wait_s)}

    @tool
    def resume_run(run_id: str, wait_s: float = 60.0) -> dict[str, Any]:
        """Drive a run that is not being driven: one whose kernels wait for this machine's GPU (written by a
        --prompts-only server), one stopped or crashed, or one whose recorded replies were not taken yet. It goes on
        to its next prompt or its end; with a real model it goes on in the background (poll pending/show_run)."""
        run = inspect_flow.run_row(run_id, ws)
        if run["status"] == "finished":
            raise ToolError(
                f"run {run['id']} has finished ({run['done_reason']}); fork_run starts from one of its rounds"
            )
        drivers.start(run["id"])
        return drivers.wait(run["id"], wait_s)

    @tool
    def steer(
        run_id: str,
        act: str,
        node: str | None = None,
        title: str | None = None,
        description: str = "",
        difficulty: int = 2,
        score: float = 0.7,
        expected_speedup: float | None = None,
        rationale: str = "",
        new_node_id: str | None = None,
        pin: bool = False,
        on: bool = True,
        author: str = "mcp-agent",
        wait_s: float = 60.0,
    ) -> dict[str, Any]:
        """Steer a run: pin|unpin|prune|revive (node), add (node = parent; title, ...), require-approval (on),
        approve|reject (the promotion the run waits on; node picks one). Tree acts apply at the run's next step."""
        if act == "add":
            args: dict[str, Any] = {
                "parent_id": node,
                "title": title,
                "description": description,
                "difficulty": difficulty,
                "score": score,
                "expected_speedup": expected_speedup,
                "rationale": rationale,
                "node_id": new_node_id,
                "pin": pin,
            }
        elif act == "require-approval":
            args = {"on": on}
        else:
            args = {"node_id": node} if node else {}
        result = steering_flow.steer(run_id, act, args, author=author, workspace=ws, drive=False)
        reply: dict[str, Any] = {"act_id": result.act_id, "act": result.act, "message": result.message}
        if act in ("approve", "reject"):
            drivers.start(result.run_id)
            reply.update(drivers.wait(result.run_id, wait_s))
        return reply

    @tool
    def fork_run(
        run_id: str,
        at_round: int,
        model: str | None = None,
        max_rounds: int | None = None,
        device: str | None = None,
        wait_s: float = 60.0,
    ) -> dict[str, Any]:
        """A new run continuing run_id from the end of round at_round, with another model or budget afterwards."""
        updates = {"model": model, "max_rounds": max_rounds, "device": device}
        config = fork_flow.create_fork(run_id, at_round, updates=updates, workspace=ws)
        drivers.start(config.run_id)
        return drivers.wait(config.run_id, wait_s)

    @tool
    def show_run(run_id: str, with_code: bool = True) -> dict[str, Any]:
        """A run: its config and status, world-model tree, every round, LLM usage, steering acts and best kernel."""
        view = inspect_flow.run_view(run_id, ws).as_json()
        if not with_code:
            view.pop("best_code", None)
        return view

    @tool
    def eval_file(
        task: str,
        path: str | None = None,
        code: str | None = None,
        device: str = "auto",
        timing_method: str | None = None,
    ) -> dict[str, Any]:
        """Run the hardened evaluator on one kernel (a file path, or the module's code): verdict, per-config
        results and timings with their spread. Untrusted code runs in a sandboxed process, never in the server."""
        if (path is None) == (code is None):
            raise ValueError("give exactly one of path and code")
        task = confined_task(task, ws)
        with tempfile.TemporaryDirectory() as tmp:
            file = confined_file(path, "kernel file", ws) if path is not None else Path(tmp) / "kernel.py"
            if code is not None:
                file.write_text(code, encoding="utf-8")
            evaluation = evaluate_file(task, file, device=device, timing_method=timing_method)
        return {"summary": evaluation.summary(), **evaluation.model_dump(mode="json")}

    return server


def serve(workspace: Path | None = None, *, base_url: str | None = None, prompts_only: bool = False) -> None:
    """Serve over stdio until the client disconnects."""
    build_server(workspace, base_url=base_url, prompts_only=prompts_only).run("stdio")
