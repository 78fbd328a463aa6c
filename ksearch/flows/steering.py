"""The ``steer`` flow: record a person's act on a run; approvals also drive the run on (CLI and MCP server alike).

Tree acts (pin, unpin, prune, revive, add, require-approval) are queued in the store and taken by the run at its
next step, whether it is paused, stopped or being driven by another process right now: the graph reads the act log
at a fixed point of every step. Before queueing, the act is tried on the run's latest tree (with the acts already
queued applied first), so a typo in a node id is an error now rather than a rejected act later.

``approve`` / ``reject`` answer the promotion a run is waiting on: the act is recorded, then the run is driven on.
"""

from __future__ import annotations

import getpass
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ksearch.agent.checkpoint import open_checkpointer
from ksearch.agent.state import SearchState
from ksearch.agent.steering import DECISION_ACTS, TREE_ACTS, Act, apply_act, parse_act
from ksearch.errors import RunBusyError, UserError
from ksearch.flows.driving import EventSink
from ksearch.flows.interactive import read_pending
from ksearch.flows.run import RunOutcome, resume_run
from ksearch.flows.workspace import open_store
from ksearch.graph import build_search_graph
from ksearch.store import Store
from ksearch.store.steering import APPLIED, PENDING, add_act, list_acts


def default_author() -> str:
    """``user@host``: who gave an act, unless told otherwise."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in some containers
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


@dataclass
class SteerResult:
    run_id: str
    act_id: int
    act: str
    message: str
    outcome: RunOutcome | None = None
    """Set when an approval drove the run on in this process."""
    busy: str | None = None


def steer(
    run_id: str,
    act: str,
    args: dict[str, Any],
    *,
    author: str | None = None,
    workspace: Path | None = None,
    on_event: EventSink | None = None,
    drive: bool = True,
) -> SteerResult:
    """Record one steering act on ``run_id`` (see ``ksearch.agent.steering`` for the acts and their arguments)."""
    author = author or default_author()
    store = open_store(workspace)
    try:
        run = store.get_run(run_id)
        run_id = run["id"]
        if run["status"] == "finished":
            raise UserError(
                f"run {run_id} already finished; steering acts apply to a running or paused run",
                hint=f"continue it as a new run, then steer that: ksearch fork {run_id} --at ROUND",
            )
        if act in {a.value for a in DECISION_ACTS}:
            return _decide(store, run_id, Act(act), args, author, workspace, on_event, drive)
        kind, parsed = parse_act(act, args)
        if kind not in TREE_ACTS:
            raise UserError(f"`{act}` is not a steering act")
        args = parsed.model_dump(exclude_none=True)
        message = _try_on_latest_tree(store, run_id, kind.value, args)
        act_id = add_act(store, run_id, kind.value, args, author)
        return SteerResult(run_id=run_id, act_id=act_id, act=kind.value, message=message)
    finally:
        store.close()


def _latest_state(store: Store, run_id: str) -> SearchState:
    saver = open_checkpointer(store.path)
    try:
        values = build_search_graph(saver).get_state({"configurable": {"thread_id": run_id}}).values
    finally:
        saver.conn.close()
    return SearchState.model_validate(values) if values else SearchState()


def _try_on_latest_tree(store: Store, run_id: str, act: str, args: dict[str, Any]) -> str:
    """What the act will do, tried on the latest checkpointed tree after the acts already queued; UserError if it
    cannot take effect there."""
    state = _latest_state(store, run_id)
    wm, approval = state.world_model, state.approval_required
    for row in list_acts(store, run_id):
        if row["status"] == PENDING and row["act"] in TREE_ACTS:
            queued = apply_act(wm, approval, row["act"], row["args"], step=state.step, round_index=state.rounds_used)
            wm, approval = queued.world_model, queued.approval_required
    outcome = apply_act(wm, approval, act, args, step=state.step, round_index=state.rounds_used)
    if not outcome.ok:
        raise UserError(f"`{act}` cannot take effect on run {run_id}: {outcome.message}")
    return f"queued: {outcome.message} (applied at the run's next step)"


def _decide(
    store: Store,
    run_id: str,
    act: Act,
    args: dict[str, Any],
    author: str,
    workspace: Path | None,
    on_event: EventSink | None,
    drive: bool,
) -> SteerResult:
    """Answer the promotion the run waits on (``node_id`` in ``args`` picks one when several wait)."""
    waiting = [w for w in read_pending(store, run_id) if w.prompt.kind == "approval" and not w.answered]
    node = args.get("node_id")
    if node:
        waiting = [w for w in waiting if w.prompt.details.get("node_id") == node]
    if not waiting:
        raise UserError(
            f"run {run_id} is not waiting for an approval" + (f" of node {node}" if node else ""),
            hint=f"see what it waits for with: ksearch pending {run_id}",
        )
    if len(waiting) > 1:
        nodes = ", ".join(str(w.prompt.details.get("node_id")) for w in waiting)
        raise UserError(
            f"run {run_id} waits for approvals of nodes {nodes}",
            hint=f"name one: ksearch steer {run_id} {act.value} NODE",
        )
    details = waiting[0].prompt.details
    decision = {"candidate_id": details["candidate_id"], "node_id": details["node_id"], "step": int(details["step"])}
    parse_act(act.value, decision)
    verb = "approved" if act == Act.APPROVE else "rejected"
    act_id = add_act(
        store,
        run_id,
        act.value,
        decision,
        author,
        status=APPLIED,
        applied_step=decision["step"],
        result=f"{verb} the promotion of node {details['node_id']}",
    )
    result = SteerResult(run_id=run_id, act_id=act_id, act=act.value, message=f"{verb} node {details['node_id']}")
    if drive:
        try:
            result.outcome = resume_run(run_id, workspace=workspace, on_event=on_event)
        except RunBusyError as exc:
            result.busy = str(exc)
    return result


def acts(run_id: str, *, workspace: Path | None = None) -> list[dict[str, Any]]:
    """The run's act log, oldest first."""
    store = open_store(workspace)
    try:
        return list_acts(store, store.get_run(run_id)["id"])
    finally:
        store.close()
