"""The ``pending`` and ``respond`` flows: read what a paused run asks, and answer it (CLI and MCP server alike).

A paused run is read from its checkpoint alone (no graph runs, no device is touched), so ``pending`` works in any
process, on any machine holding a copy of the workspace, and after the process that paused was killed. ``respond``
records the reply as the LLM call's row first, then drives the run: once it returned, the reply is never lost.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ksearch.agent.checkpoint import open_checkpointer, reading_checkpointer
from ksearch.errors import KsearchError, RunBusyError, UserError
from ksearch.flows.driving import EventSink
from ksearch.flows.run import RunOutcome, resume_run
from ksearch.flows.workspace import open_store
from ksearch.graph import build_search_graph
from ksearch.llm.interactive import INTERACTIVE_MODEL, Waiting, waiting_prompts
from ksearch.llm.recorder import StoreRecorder
from ksearch.llm.usage import RecordedCall
from ksearch.store import Store


@dataclass
class PendingView:
    """A run and what it waits for (empty when it waits for nothing)."""

    run_id: str
    status: str
    prompts: list[Waiting] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "prompts": [w.model_dump(mode="json") for w in self.prompts],
        }


@dataclass
class Response:
    """What ``respond`` did: the key it answered, and the run's outcome if this process drove it on."""

    run_id: str
    key: str
    outcome: RunOutcome | None = None
    busy: str | None = None
    """Set when another process drives the run: the reply is recorded and that process takes it at its next step."""


def read_pending(store: Store, run_id: str) -> list[Waiting]:
    """The pauses of ``run_id`` from its latest checkpoint (answered ones included, marked)."""
    saver = reading_checkpointer(store.connection) if store.read_only else open_checkpointer(store.path)
    try:
        snapshot = build_search_graph(saver).get_state({"configurable": {"thread_id": run_id}})
        return waiting_prompts(snapshot, store, run_id)
    except sqlite3.OperationalError:
        if store.read_only:
            return []  # a workspace without checkpoints (nothing ever ran in it): nothing waits
        raise
    finally:
        if not store.read_only:
            saver.conn.close()


def pending(run_id: str, *, workspace: Path | None = None) -> PendingView:
    """What the run waits for; a unique prefix of the run id is enough."""
    store = open_store(workspace, read_only=True)
    try:
        run = store.get_run(run_id)
        return PendingView(run_id=run["id"], status=run["status"], prompts=read_pending(store, run["id"]))
    finally:
        store.close()


def latest_waiting_run(*, workspace: Path | None = None) -> str:
    """The most recent run with status ``waiting`` (for ``ksearch pending`` without a run id)."""
    store = open_store(workspace, read_only=True)
    try:
        for run in store.list_runs():
            if run["status"] == "waiting":
                return run["id"]
    finally:
        store.close()
    raise UserError("no run is waiting for a reply", hint="list runs with: ksearch runs")


def choose_prompt(prompts: list[Waiting], key: str | None, run_id: str) -> Waiting:
    """The unanswered pause that ``key`` names, or the only one; a clear error otherwise (a kernel waiting for its
    device is no prompt to answer)."""
    open_prompts = [w for w in prompts if not w.answered and w.prompt.kind != "device"]
    if not open_prompts:
        devices = [w for w in prompts if w.prompt.kind == "device"]
        if devices:
            raise UserError(
                f"run {run_id} waits for its device, not for a reply ({len(devices)} evaluation(s))",
                hint=f"continue it on a machine with the device: ksearch resume {run_id}",
            )
        raise UserError(f"run {run_id} is not waiting for a reply", hint=f"see it with: ksearch show {run_id}")
    if key is not None:
        for w in open_prompts:
            if w.prompt.key == key:
                return w
        keys = ", ".join(w.prompt.key for w in open_prompts)
        raise UserError(f"run {run_id} is not waiting for {key!r}; it waits for: {keys}")
    if len(open_prompts) > 1:
        keys = ", ".join(w.prompt.key for w in open_prompts)
        raise UserError(f"run {run_id} waits for {len(open_prompts)} replies ({keys})", hint="name one with --key KEY")
    return open_prompts[0]


def respond(
    run_id: str,
    reply: str,
    *,
    key: str | None = None,
    workspace: Path | None = None,
    on_event: EventSink | None = None,
    drive: bool = True,
    prompts_only: bool = False,
) -> Response:
    """Record ``reply`` as the answer to the run's pending LLM prompt (``key``, or the only one), then drive the run
    until its next pause or its end (``drive=False`` only records: the next ``resume`` or running driver takes it;
    ``prompts_only``: drive it without its device, up to the next evaluation, as ``resume_run`` does).

    Atomic with its refusal: when driving, the reply is recorded only once every check of the drive passed (the
    task unchanged, the device here, the endpoints accepted), so a refused command leaves the run waiting for the
    same prompt. A run another process drives takes the recorded reply at its next step (``Response.busy``)."""
    if not reply.strip():
        raise UserError("the reply is empty", hint="write the reply to a file and pass --file FILE (or pipe it in)")
    store = open_store(workspace, read_only=True)
    try:
        run = store.get_run(run_id)
        run_id = run["id"]
        if run["status"] == "finished":
            raise UserError(
                f"run {run_id} already finished", hint=f"continue it as a new run: ksearch fork {run_id} --at ROUND"
            )
        prompt = choose_prompt(read_pending(store, run_id), key, run_id).prompt
    finally:
        store.close()
    if prompt.kind == "approval":
        raise UserError(
            f"run {run_id} waits for the approval of a new best, not for a reply",
            hint=f"answer it with: ksearch steer {run_id} approve (or reject)",
        )
    call = RecordedCall(
        call_key=prompt.key,
        role=prompt.role,
        model=INTERACTIVE_MODEL,
        prompt=prompt.prompt,
        reply=reply,
        latency_s=max(0.0, time.time() - prompt.asked_at),
        attempt=prompt.attempt,
        cost_usd=0.0,
    )
    response = Response(run_id=run_id, key=prompt.key)
    if not drive:
        store = open_store(workspace)
        try:
            StoreRecorder(store, run_id).record(call)
        finally:
            store.close()
        return response
    recorded: list[bool] = []

    def record(store: Store) -> None:
        StoreRecorder(store, run_id).record(call)
        recorded.append(True)

    try:
        response.outcome = resume_run(
            run_id, workspace=workspace, on_event=on_event, prompts_only=prompts_only, before_drive=record
        )
    except RunBusyError as exc:
        response.busy = str(exc)
    except KsearchError as exc:
        if not recorded:
            exc.hint = "; ".join(
                h
                for h in (
                    exc.hint,
                    f"the reply was not recorded (`ksearch respond {run_id} --no-drive` records it only)",
                )
                if h
            )
        raise
    return response
