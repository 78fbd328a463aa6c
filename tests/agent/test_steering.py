"""Steering acts on the world model: pure, deterministic, and stronger than the planner where a person decided."""

from __future__ import annotations

import pytest

from ksearch.agent.edits import apply_edit_script
from ksearch.agent.selection import select_actions
from ksearch.agent.steering import apply_act, parse_act
from ksearch.agent.world_model import (
    ROOT_ID,
    Action,
    Node,
    NodeStatus,
    SolutionRef,
    WorldModel,
    attach_solution,
    mark_failed,
)
from ksearch.errors import UserError


def tree() -> WorldModel:
    """root -> a (0.9), b (0.5, difficulty 5), c (0.3); a1 under a."""
    nodes = {ROOT_ID: Node(id=ROOT_ID)}
    for node_id, score, difficulty in (("a", 0.9, 2), ("b", 0.5, 5), ("c", 0.3, 2)):
        nodes[node_id] = Node(
            id=node_id, parent_id=ROOT_ID, action=Action(title=node_id, score=score, difficulty=difficulty)
        )
    nodes["a1"] = Node(id="a1", parent_id="a", action=Action(title="a1", score=0.99, difficulty=1))
    return WorldModel(nodes=nodes)


def act(wm: WorldModel, name: str, approval: bool = False, **args):
    return apply_act(wm, approval, name, args, step=3, round_index=7)


def test_pin_comes_first_and_overrides_the_difficulty_gate():
    wm = tree()
    assert select_actions(wm, 1) == ["a"]
    out = act(wm, "pin", node_id="b")
    assert out.ok and out.world_model.nodes["b"].pinned
    assert select_actions(out.world_model, 2) == ["b", "a"]  # b is above the gate (difficulty 5) yet chosen first
    undone = act(out.world_model, "unpin", node_id="b")
    assert undone.ok and select_actions(undone.world_model, 1) == ["a"]


def test_prune_closes_the_subtree_and_revive_reopens_it():
    ref = SolutionRef(candidate_id="x", evaluation_id="e", verdict="passed")
    wm = attach_solution(tree(), "a", ref)
    assert "a1" in [n.id for n in wm.frontier()]
    pruned = act(wm, "prune", node_id="a")
    assert pruned.ok and "and the 1 node(s) under it" in pruned.message
    assert [n.id for n in pruned.world_model.frontier()] == ["b", "c"]
    assert not act(pruned.world_model, "pin", node_id="a1").ok  # in a pruned branch
    revived = act(pruned.world_model, "revive", node_id="a")
    assert revived.ok and "a1" in [n.id for n in revived.world_model.frontier()]


def test_revive_a_failed_node_and_pin_needs_it_open():
    wm = mark_failed(tree(), "c")
    assert not act(wm, "pin", node_id="c").ok
    out = act(wm, "revive", node_id="c")
    assert out.ok and out.world_model.nodes["c"].status == NodeStatus.OPEN and out.world_model.nodes["c"].revived
    assert not act(tree(), "revive", node_id="c").ok  # open and not pruned: nothing to revive


def test_add_inserts_a_persons_hypothesis_that_the_planner_cannot_delete():
    out = act(tree(), "add", parent_id=ROOT_ID, title="Use a persistent kernel", score=0.2, pin=True)
    assert out.ok, out.message
    node_id = next(n for n in out.world_model.nodes if n.startswith("p3_"))
    node = out.world_model.nodes[node_id]
    assert node.by_person and node.pinned and node.action.title == "Use a persistent kernel"
    assert select_actions(out.world_model, 1) == [node_id]
    script = {"ops": [{"op": "delete", "node_id": node_id}]}
    refused = apply_edit_script(out.world_model, script, round_index=8)
    assert not refused.ok and "by a person" in refused.errors[0]
    bad = act(tree(), "add", parent_id="nope", title="x")
    assert not bad.ok and "does not exist" in bad.message


def test_the_planner_cannot_revive_what_a_person_pruned():
    wm = mark_failed(act(tree(), "prune", node_id="c").world_model, "c")
    script = {"ops": [{"op": "update", "node_id": "c", "patch": {"revive": True}}]}
    out = apply_edit_script(wm, script, round_index=8)
    assert not out.ok and "pruned by a person" in out.errors[0]


def test_require_approval_and_invalid_acts_are_reported_not_raised():
    out = act(tree(), "require-approval", on=True)
    assert out.ok and out.approval_required
    assert act(tree(), "require-approval", True, on=False).approval_required is False
    assert not act(tree(), "pin", node_id="zz").ok
    assert not act(tree(), "pin", node_id=ROOT_ID).ok
    assert not act(tree(), "approve", candidate_id="x", node_id="a", step=1).ok  # answers a pause, no tree act
    assert not act(tree(), "frobnicate").ok
    with pytest.raises(UserError, match="unknown steering act"):
        parse_act("frobnicate", {})
    with pytest.raises(UserError, match="title"):
        parse_act("add", {"parent_id": "root"})
