"""The ``fork`` flow: a new run that continues a past run from the end of one of its rounds (LangGraph time travel).

The parent's checkpoint history (``graph.get_state_history``) holds its state at every step boundary: after setup
and after each prune, when no cycle is open. The fork takes the last boundary at or before round R, writes that
state into its own thread with ``update_state`` (as if ``setup`` had produced it), and goes on with its own model and
settings. Rounds up to that boundary are not run again: the tree, the best and the counters are in the state, and
the parent's attempts, LLM calls and steering acts up to there are copied so that ``show`` and ``replay`` of the
fork tell the whole story.

When R falls inside a step (a cycle runs several rounds; parallel cycles share a step), that step runs again from its
start, but everything of the parent's up to round R is served from the store: its plan reply and the coder's replies
for rounds <= R are copied into the fork's LLM calls (so no model is asked for them), and its kernels are found in
the evaluation cache (same code, same machine: no evaluation). Only rounds after R ask the fork's model.
Copied calls are marked replayed; they keep their token counts (as a replay does) and cost nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ksearch.agent.checkpoint import open_checkpointer
from ksearch.agent.config import RunConfig, option_errors
from ksearch.agent.state import SearchState
from ksearch.agent.steering import TREE_ACTS
from ksearch.errors import UserError
from ksearch.flows import trust
from ksearch.flows.driving import EventSink
from ksearch.flows.run import RunOutcome, create_context, ensure_new_run_id, resume_run
from ksearch.flows.run_config import SEED_CYCLE_ID, run_config, stored_config
from ksearch.flows.workspace import open_store
from ksearch.graph import build_search_graph
from ksearch.store import Store
from ksearch.store.steering import copy_acts

_PLAN_KEY = re.compile(r"^plan:(\d+):")
_WRITE_KEY = re.compile(r"^write:c(\d+):(\d+)(#.*)?$")
_CYCLE_ID = re.compile(r"^c(\d+)$")


@dataclass(frozen=True)
class ForkPoint:
    """Where a fork starts: the parent's state at a step boundary, and the rounds after it that are inherited."""

    state: SearchState
    at_round: int

    @property
    def mid_step(self) -> bool:
        """True when round ``at_round`` ends inside the step that starts at this boundary."""
        return self.at_round > self.state.rounds_used


def fork_point(store: Store, parent_id: str, at_round: int) -> ForkPoint:
    """The last step boundary of ``parent_id`` at or before round ``at_round``."""
    saver = open_checkpointer(store.path)
    try:
        history = list(build_search_graph(saver).get_state_history({"configurable": {"thread_id": parent_id}}))
    finally:
        saver.conn.close()
    boundaries = []
    for snapshot in reversed(history):  # oldest first
        if not snapshot.values or tuple(snapshot.next) not in (("plan",), ()):
            continue
        state = SearchState.model_validate(snapshot.values)
        if state.edit_errors or state.plan_reply is not None or state.cycle_results:
            continue  # the planner's repair loop, not a boundary between steps
        boundaries.append(state)
    if not boundaries:
        raise UserError(
            f"run {parent_id} has no checkpoint to fork from", hint=f"resume it first: ksearch resume {parent_id}"
        )
    last = boundaries[-1]
    recorded = max(last.rounds_used, _rounds_recorded(store, parent_id))
    if at_round < 0 or at_round > recorded:
        raise UserError(f"run {parent_id} has rounds 0..{recorded}; cannot fork at round {at_round}")
    chosen = [s for s in boundaries if s.rounds_used <= at_round][-1]
    return ForkPoint(state=chosen, at_round=at_round)


def _rounds_recorded(store: Store, run_id: str) -> int:
    return max((a["round_index"] for a in store.list_attempts(run_id)), default=0)


def fork_config(parent: RunConfig, at_round: int, updates: dict[str, Any]) -> RunConfig:
    """The fork's config: the parent's, with a new id and ``updates`` (model, budgets, ...) applied and validated."""
    data = {
        **parent.model_dump(),
        "run_id": None,  # a new one, unless updates name it
        "replay_of": None,
        "fork_of": parent.run_id,
        "fork_round": at_round,
        **{k: v for k, v in updates.items() if v is not None},
    }
    if data["model"] != parent.model and "base_url" not in updates:
        data["base_url"] = None  # a new model does not inherit the parent's server
    try:
        return run_config(**data)
    except ValidationError as exc:
        problems = "; ".join(option_errors(exc.errors()))
        raise UserError(f"invalid fork options: {problems}") from None


def fork_run(
    run_id: str,
    at_round: int,
    *,
    updates: dict[str, Any] | None = None,
    workspace: Path | None = None,
    on_event: EventSink | None = None,
    trust_task: bool = False,
) -> RunOutcome:
    """Create the fork of ``run_id`` at ``at_round`` and drive it until it pauses or ends."""
    config = create_fork(run_id, at_round, updates=updates, workspace=workspace, trust_task=trust_task)
    return resume_run(config.run_id, workspace=workspace, on_event=on_event, base_url=(updates or {}).get("base_url"))


def create_fork(
    run_id: str,
    at_round: int,
    *,
    updates: dict[str, Any] | None = None,
    workspace: Path | None = None,
    trust_task: bool = False,
) -> RunConfig:
    """Create the fork of ``run_id`` at ``at_round`` (not driven yet: ``resume_run`` drives it, in any process). The
    parent's endpoints and task file are used as ``resume`` would (``ksearch.flows.trust``; ``trust_task``)."""
    updates = updates or {}
    store = open_store(workspace)
    try:
        parent = stored_config(store.get_run(run_id))
        config = fork_config(parent, at_round, updates)
        ensure_new_run_id(store, config.run_id)  # before the parent's history is read: a taken id is refused at once
        point = fork_point(store, parent.run_id, at_round)
        command = f"ksearch fork {parent.run_id} --at {at_round}"
        folder = store.path.parent
        trust.accept_endpoints(
            config.model_copy(update={"run_id": parent.run_id}),  # the parent's record vouches for its endpoints
            command=command,
            workspace=folder,
            base_url=updates.get("base_url"),
            scheduler=updates.get("scheduler"),
        )
        trust.check_task_file(parent, folder, trusted=trust_task, command=command)
        ctx = create_context(config, store, None)
        ctx.shutdown()  # nothing is evaluated here: the process that drives the fork evaluates
        config = ctx.config
        _inherit(store, parent.run_id, config.run_id, point)
        state = point.state.model_copy(update={"done_reason": None})
        if updates.get("require_approval") is not None:
            state = state.model_copy(update={"approval_required": bool(updates["require_approval"])})
        saver = open_checkpointer(store.path)
        try:  # the fork's thread starts from the parent's boundary state, as if setup had just produced it
            values = {name: getattr(state, name) for name in SearchState.model_fields}
            build_search_graph(saver).update_state(
                {"configurable": {"thread_id": config.run_id}}, values, as_node="setup"
            )
        finally:
            saver.conn.close()
        store.record_snapshot(config.run_id, state.step, "fork", state.world_model.model_dump_json())
        best = state.best
        store.update_run(
            config.run_id,
            rounds_used=state.rounds_used,
            best_candidate_id=best.candidate_id if best else None,
            best_evaluation_id=best.evaluation_id if best else None,
            best_score=best.score if best else None,
        )
        return config
    finally:
        store.close()


def _inherit(store: Store, parent_id: str, fork_id: str, point: ForkPoint) -> None:
    """Copy the parent's rounds, LLM calls and steering acts up to the fork point into the fork."""
    state = point.state
    done_cycles = state.cycles_started  # cycles c1..cN ended before the boundary
    attempts = store.list_attempts(parent_id)
    late_rounds = (
        {
            (a["cycle_id"], a["attempt"])
            for a in attempts
            if _cycle_number(a["cycle_id"]) > done_cycles and a["round_index"] <= point.at_round
        }
        if point.mid_step
        else set()
    )
    for a in attempts:
        if a["cycle_id"] == SEED_CYCLE_ID or 0 < _cycle_number(a["cycle_id"]) <= done_cycles:
            store.record_attempt({k: v for k, v in a.items() if k != "id"} | {"run_id": fork_id})
    for call in store.list_llm_calls(parent_id):
        if _inherited(call["call_key"], state.step, done_cycles, point.mid_step, late_rounds):
            row = {k: v for k, v in call.items() if k not in ("id", "run_id")}
            store.record_llm_call(fork_id, row | {"replayed": True, "cost_usd": 0.0})
    copy_acts(store, parent_id, fork_id, steps=range(0, state.step), settled=True)
    if point.mid_step:  # the step re-runs: its tree acts are applied again at the same point
        copy_acts(store, parent_id, fork_id, steps=range(state.step, state.step + 1), kinds=TREE_ACTS)


def _cycle_number(cycle_id: str) -> int:
    match = _CYCLE_ID.match(cycle_id)
    return int(match.group(1)) if match else 0


def _inherited(key: str, step: int, done_cycles: int, mid_step: bool, late_rounds: set[tuple[str, int]]) -> bool:
    """Whether the parent's call ``key`` happened before the fork point."""
    plan = _PLAN_KEY.match(key)
    if plan:
        plan_step = int(plan.group(1))
        return plan_step < step or (mid_step and plan_step == step)
    write = _WRITE_KEY.match(key)
    if write:
        cycle, attempt = int(write.group(1)), int(write.group(2))
        return cycle <= done_cycles or (f"c{cycle}", attempt) in late_rounds
    return False
