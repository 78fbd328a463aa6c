"""Steering acts: what a person or an outside agent may ask of a running search, as typed data, and their effect.

Acts are recorded in the store (``ksearch.store.steering``) by ``ksearch steer`` and applied by code, never by the
LLM: tree acts at one fixed point of every step (``edit_tree``, after the planner's edits and before selection),
approvals when ``prune`` is about to promote a new best. Everything here is pure: no I/O, deterministic, so a
replay that applies the same acts at the same steps takes the same path.

- ``pin NODE``: the selection policy chooses the action first (above the difficulty gate too) while it can run.
- ``unpin NODE``: undo a pin.
- ``prune NODE``: close the node and its subtree: nothing in it is chosen, and the planner cannot revive it.
- ``revive NODE``: re-open a pruned or failed node.
- ``add PARENT``: a person's hypothesis, inserted as an action under PARENT (validated like a planner's insert).
- ``require-approval [on|off]``: promotions of a new best wait for ``approve`` / ``reject``.
- ``approve`` / ``reject``: answer the promotion the run is waiting on.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ksearch.agent.edit_ops import InsertNode, NewNode
from ksearch.agent.edits import apply_edit_script
from ksearch.agent.world_model import (
    ROOT_ID,
    Action,
    Difficulty,
    NodeId,
    NodeStatus,
    NonEmptyStr,
    UnitFloat,
    WorldModel,
)
from ksearch.errors import UserError


class Act(StrEnum):
    PIN = "pin"
    UNPIN = "unpin"
    PRUNE = "prune"
    REVIVE = "revive"
    ADD = "add"
    REQUIRE_APPROVAL = "require-approval"
    APPROVE = "approve"
    REJECT = "reject"


TREE_ACTS = frozenset({Act.PIN, Act.UNPIN, Act.PRUNE, Act.REVIVE, Act.ADD, Act.REQUIRE_APPROVAL})
"""Applied by ``edit_tree`` at the start of selection."""
DECISION_ACTS = frozenset({Act.APPROVE, Act.REJECT})
"""Read by ``prune`` when a promotion waits for approval."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NodeArgs(_Strict):
    node_id: str


class AddArgs(_Strict):
    """A person's hypothesis: an action under ``parent_id``."""

    parent_id: str
    title: NonEmptyStr
    description: str = ""
    difficulty: Difficulty = 2
    score: UnitFloat = 0.7
    expected_speedup: float | None = Field(default=None, gt=0.0, le=1000.0)
    rationale: str = ""
    node_id: NodeId | None = None
    """Optional; a deterministic id (``p<step>_<round>_<k>``) is generated when absent."""
    pin: bool = False
    """Also pin the new node."""


class ApprovalArgs(_Strict):
    on: bool = True


class DecisionArgs(_Strict):
    """Which promotion is answered: the candidate, its node and the step whose prune asked."""

    candidate_id: str
    node_id: str
    step: int


ARGS: dict[Act, type[BaseModel]] = {
    Act.PIN: NodeArgs,
    Act.UNPIN: NodeArgs,
    Act.PRUNE: NodeArgs,
    Act.REVIVE: NodeArgs,
    Act.ADD: AddArgs,
    Act.REQUIRE_APPROVAL: ApprovalArgs,
    Act.APPROVE: DecisionArgs,
    Act.REJECT: DecisionArgs,
}


def parse_act(act: str, args: dict[str, Any]) -> tuple[Act, BaseModel]:
    """Validate an act and its arguments; UserError with every problem otherwise."""
    try:
        kind = Act(act)
    except ValueError:
        raise UserError(f"unknown steering act {act!r}", hint="acts: " + ", ".join(a.value for a in Act)) from None
    try:
        return kind, ARGS[kind].model_validate(args)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'args'}: {e['msg']}" for e in exc.errors())
        raise UserError(f"bad arguments for `{kind.value}`: {problems}") from None


@dataclass(frozen=True)
class ActOutcome:
    """The tree and approval flag after an act, whether it took effect, and a sentence saying what happened."""

    world_model: WorldModel
    approval_required: bool
    ok: bool
    message: str


def apply_act(
    wm: WorldModel, approval_required: bool, act: str, args: dict[str, Any], *, step: int, round_index: int
) -> ActOutcome:
    """Apply one tree act. An act that cannot take effect (unknown node, nothing to undo) changes nothing and says
    why; it is recorded as rejected, never raised, so a queued act can never stop a run."""
    try:
        kind, parsed = parse_act(act, args)
    except UserError as exc:
        return ActOutcome(wm, approval_required, False, str(exc))
    if kind == Act.REQUIRE_APPROVAL:
        assert isinstance(parsed, ApprovalArgs)
        state = "required" if parsed.on else "no longer required"
        return ActOutcome(wm, parsed.on, True, f"approval of new bests is {state}")
    if kind == Act.ADD:
        assert isinstance(parsed, AddArgs)
        return _add(wm, approval_required, parsed, step=step, round_index=round_index)
    if kind not in TREE_ACTS:
        return ActOutcome(
            wm, approval_required, False, f"`{kind.value}` answers a waiting promotion; it is no tree act"
        )
    assert isinstance(parsed, NodeArgs)
    problem = _node_problem(wm, parsed.node_id)
    if problem is not None:
        return ActOutcome(wm, approval_required, False, problem)
    changed, message = _NODE_ACTS[kind](wm, parsed.node_id)
    if changed is None:
        return ActOutcome(wm, approval_required, False, message)
    return ActOutcome(changed, approval_required, True, message)


def _node_problem(wm: WorldModel, node_id: str) -> str | None:
    if node_id not in wm.nodes:
        known = ", ".join(sorted(n for n in wm.nodes if n != ROOT_ID)[:20])
        return f"node '{node_id}' does not exist (nodes: {known or 'none yet'})"
    if node_id == ROOT_ID:
        return "the root cannot be steered; steer its children, or add a hypothesis under it"
    return None


def _with(wm: WorldModel, node_id: str, **update: Any) -> WorldModel:
    node = wm.nodes[node_id].model_copy(update=update)
    return wm.model_copy(update={"nodes": {**wm.nodes, node_id: node}})


def _pin(wm: WorldModel, node_id: str) -> tuple[WorldModel | None, str]:
    node = wm.nodes[node_id]
    if node.action is None:
        return None, f"node '{node_id}' has no action to run"
    if node.pinned:
        return None, f"node '{node_id}' is already pinned"
    if wm.is_pruned(node_id):
        return None, f"node '{node_id}' is in a pruned branch; revive it first"
    if node.status == NodeStatus.FAILED:
        return None, f"node '{node_id}' failed; revive it first"
    if node.status == NodeStatus.SOLVED:
        return None, f"node '{node_id}' is already solved; pin an action under it, or add one"
    waits = "" if node in wm.frontier() else " (it runs once its parent is solved)"
    return _with(wm, node_id, pinned=True), f"pinned '{node_id}': chosen first while it can run{waits}"


def _unpin(wm: WorldModel, node_id: str) -> tuple[WorldModel | None, str]:
    if not wm.nodes[node_id].pinned:
        return None, f"node '{node_id}' is not pinned"
    return _with(wm, node_id, pinned=False), f"unpinned '{node_id}'"


def _prune(wm: WorldModel, node_id: str) -> tuple[WorldModel | None, str]:
    if wm.nodes[node_id].pruned:
        return None, f"node '{node_id}' is already pruned"
    below = len(wm.subtree_ids(node_id)) - 1
    return _with(wm, node_id, pruned=True, pinned=False), f"pruned '{node_id}' and the {below} node(s) under it"


def _revive(wm: WorldModel, node_id: str) -> tuple[WorldModel | None, str]:
    node = wm.nodes[node_id]
    if node.pruned:
        update: dict[str, Any] = {"pruned": False}
        if node.status == NodeStatus.FAILED:
            update.update(status=NodeStatus.OPEN, revived=True)
        return _with(wm, node_id, **update), f"revived '{node_id}' (no longer pruned)"
    if node.status == NodeStatus.FAILED:
        return _with(wm, node_id, status=NodeStatus.OPEN, revived=True), f"revived failed node '{node_id}'"
    return None, f"node '{node_id}' is {node.status.value} and not pruned: nothing to revive"


_NODE_ACTS = {Act.PIN: _pin, Act.UNPIN: _unpin, Act.PRUNE: _prune, Act.REVIVE: _revive}


def _add(wm: WorldModel, approval_required: bool, args: AddArgs, *, step: int, round_index: int) -> ActOutcome:
    if args.parent_id in wm.nodes and wm.is_pruned(args.parent_id):
        return ActOutcome(wm, approval_required, False, f"node '{args.parent_id}' is in a pruned branch")
    action = Action(
        title=args.title,
        description=args.description,
        difficulty=args.difficulty,
        score=args.score,
        expected_speedup=args.expected_speedup,
        rationale=args.rationale,
    )
    op = InsertNode(
        op="insert",
        parent_id=args.parent_id,
        node=NewNode(id=args.node_id, decision="Person's hypothesis", choice=args.title, action=action),
    )
    outcome = apply_edit_script(
        wm, {"ops": [op.model_dump(exclude_none=True)]}, round_index=round_index, max_new_nodes=1, id_prefix=f"p{step}_"
    )
    if not outcome.ok:
        return ActOutcome(wm, approval_required, False, "; ".join(outcome.errors))
    node_id = outcome.new_node_ids[0]
    changed = _with(outcome.world_model, node_id, by_person=True, pinned=args.pin)
    pinned = " and pinned it" if args.pin else ""
    return ActOutcome(
        changed, approval_required, True, f"added hypothesis '{node_id}' under '{args.parent_id}'{pinned}"
    )
