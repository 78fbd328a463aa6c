"""edit_tree (no LLM): apply the planner's script atomically, then choose the next action(s) and open their cycles.

An invalid script goes back to ``plan`` with its errors (a bounded number of times); the tree is never half-edited.
"""

from __future__ import annotations

from typing import Literal

import structlog
from langgraph.graph import END
from langgraph.runtime import Runtime
from langgraph.types import Command, Send

from ksearch.agent.context import SearchContext
from ksearch.agent.edits import apply_edit_script
from ksearch.agent.fallback import ensure_frontier
from ksearch.agent.prompting import tree_view
from ksearch.agent.selection import SelectionPolicy, select_actions
from ksearch.agent.skill_use import check_bindings
from ksearch.agent.state import CycleState, SearchState, SiblingCycle
from ksearch.agent.steering import TREE_ACTS, apply_act
from ksearch.agent.world_model import SolutionRef, WorldModel
from ksearch.store.steering import APPLIED, REJECTED, claim_acts, settle_act

log = structlog.get_logger(__name__)


def edit_tree(state: SearchState, runtime: Runtime[SearchContext]) -> Command[Literal["plan", "cycle", "__end__"]]:
    ctx = runtime.context
    cfg = ctx.config
    if state.done_reason:
        return Command(goto=END)
    wm = state.world_model
    errors: list[str] = []
    if state.plan_reply is not None:
        outcome = apply_edit_script(
            wm,
            state.plan_reply,
            round_index=state.rounds_used,
            max_new_nodes=cfg.max_new_nodes if wm.is_initialised else cfg.max_new_nodes_init,
            id_prefix=f"n{state.step}_",
        )
        errors = list(outcome.errors) or check_bindings(ctx, wm, outcome.world_model)
        if not errors:
            wm = outcome.world_model
    else:
        errors = [state.plan_error or "the planner gave no edit script"]

    if errors and state.edit_attempt < cfg.max_plan_repairs:
        log.info("edit_tree.rejected", run_id=ctx.run_id, errors=errors[:5], attempt=state.edit_attempt)
        runtime.stream_writer({"event": "plan_rejected", "errors": errors})
        return Command(goto="plan", update={"edit_errors": errors, "edit_attempt": state.edit_attempt + 1})
    if errors:
        log.warning("edit_tree.gave_up_on_plan", run_id=ctx.run_id, errors=errors[:5])

    wm, approval_required = apply_steering(state, wm, ctx, runtime)
    wm, inserted = ensure_frontier(wm, round_index=state.rounds_used)
    if inserted:
        log.info("edit_tree.fallback_action", run_id=ctx.run_id, node_id=inserted)
    ctx.store.record_snapshot(ctx.run_id, state.step, "edit_tree", wm.model_dump_json())

    reset = {
        "world_model": wm,
        "counter_requests": [] if errors else list((state.plan_reply or {}).get("counters_for") or []),
        "edit_errors": [],
        "edit_attempt": 0,
        "plan_reply": None,
        "plan_error": None,
        "approval_required": approval_required,
    }
    remaining = cfg.max_rounds - state.rounds_used
    policy = SelectionPolicy(max_difficulty=cfg.max_difficulty, explore_every=cfg.explore_every)
    selected = select_actions(wm, cfg.parallel_cycles, policy, first_cycle=state.cycles_started + 1)
    if remaining <= 0 or not selected:
        reason = "round budget spent" if remaining <= 0 else "no executable action left"
        return Command(goto=END, update={**reset, "done_reason": reason})

    selected = selected[:remaining]
    sends = cycle_sends(wm, selected, state, ctx, remaining)
    log.info("edit_tree.selected", run_id=ctx.run_id, nodes=selected, rounds_left=remaining)
    runtime.stream_writer(
        {"event": "selected", "nodes": [{"node_id": n, "title": wm.nodes[n].action.title} for n in selected]}  # type: ignore[union-attr]
    )
    return Command(goto=sends, update={**reset, "cycles_started": state.cycles_started + len(sends), "evidence": []})


def apply_steering(
    state: SearchState, wm: WorldModel, ctx: SearchContext, runtime: Runtime[SearchContext]
) -> tuple[WorldModel, bool]:
    """Apply the steering acts due at this step, in the order they were given (``ksearch steer``, from any process).

    Claiming stamps each act with this step first, so a re-run of this node after a crash applies the same acts to
    the same checkpointed tree; their outcomes are recorded again, identically."""
    approval = state.approval_required
    for row in claim_acts(ctx.store, ctx.run_id, state.step, TREE_ACTS):
        outcome = apply_act(wm, approval, row["act"], row["args"], step=state.step, round_index=state.rounds_used)
        wm, approval = outcome.world_model, outcome.approval_required
        status = APPLIED if outcome.ok else REJECTED
        settle_act(ctx.store, row["id"], status=status, result=outcome.message, applied_round=state.rounds_used)
        log.info(
            "edit_tree.steered",
            run_id=ctx.run_id,
            act=row["act"],
            args=row["args"],
            status=status,
            result=outcome.message,
        )
        runtime.stream_writer(
            {
                "event": "steered",
                "act": row["act"],
                "author": row["author"],
                "ok": outcome.ok,
                "message": outcome.message,
            }
        )
    return wm, approval


def cycle_sends(
    wm: WorldModel, selected: list[str], state: SearchState, ctx: SearchContext, remaining: int
) -> list[Send]:
    """One Send per action. The remaining rounds are shared evenly; each cycle may also be capped by config."""
    share = max(1, remaining // len(selected))
    if ctx.config.max_attempts_per_cycle:
        share = min(share, ctx.config.max_attempts_per_cycle)
    view = tree_view(wm, limit=6000, with_notes=False)
    cycles = [
        SiblingCycle(
            cycle_id=f"c{state.cycles_started + i + 1}",
            node_id=node_id,
            title=wm.nodes[node_id].action.title,  # type: ignore[union-attr]
            base_candidate_id=_base(wm, node_id).candidate_id if _base(wm, node_id) else None,
        )
        for i, node_id in enumerate(selected)
    ]
    sends = []
    for i, node_id in enumerate(selected):
        node = wm.nodes[node_id]
        base = _base(wm, node_id)
        assert node.action is not None
        payload = CycleState(
            cycle_id=cycles[i].cycle_id,
            node_id=node_id,
            action=node.action,
            base_candidate_id=base.candidate_id if base else None,
            base_score=base.score if base else None,
            attempt_budget=share,
            round_offset=state.rounds_used + i * share,
            tree_view=view,
            siblings=[c for c in cycles if c.cycle_id != cycles[i].cycle_id],
        )
        sends.append(Send("cycle", payload.model_dump()))
    return sends


def _base(wm: WorldModel, node_id: str) -> SolutionRef | None:
    """The solution a node's cycle starts from: its parent's (the seed's on the root), or None (from the spec)."""
    node = wm.nodes[node_id]
    parent = wm.nodes[node.parent_id] if node.parent_id else None
    return parent.solution if parent is not None else None
