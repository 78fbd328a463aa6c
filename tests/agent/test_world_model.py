"""The world model's queries and system-owned writes (``ksearch.agent.world_model``): depths and branches, which
actions the frontier offers (failed, pruned, solved, orphaned), the best node, the evidence a cycle leaves, and the
defaults a planner's omissions fall back to."""

from __future__ import annotations

from ksearch.agent.world_model import (
    ROOT_ID,
    Action,
    Node,
    NodeStatus,
    SolutionRef,
    WorldModel,
    attach_seed,
    attach_solution,
    mark_failed,
)


def _node(node_id: str, parent: str | None = ROOT_ID, *, action: bool = True, **fields) -> Node:
    return Node(id=node_id, parent_id=parent, action=Action(title=f"do {node_id}") if action else None, **fields)


def _tree(*nodes: Node) -> WorldModel:
    return WorldModel(nodes={ROOT_ID: Node(id=ROOT_ID), **{n.id: n for n in nodes}})


def _ref(name: str, score: float | None) -> SolutionRef:
    return SolutionRef(candidate_id=f"c-{name}", evaluation_id=f"e-{name}", verdict="passed", score=score)


def test_defaults_a_planner_may_omit() -> None:
    action = Action(title="t")
    assert (action.difficulty, action.score, action.expected_speedup, action.skill_id) == (3, 0.5, None, None)
    node = Node(id="n")
    assert (node.rating, node.confidence, node.created_round, node.status) == (5.0, 0.5, 0, NodeStatus.OPEN)
    assert (node.cycles, node.failed_cycles, node.revived, node.pinned, node.pruned, node.by_person) == (
        0,
        0,
        False,
        False,
        False,
        False,
    )
    ref = SolutionRef(candidate_id="c", evaluation_id="e", verdict="passed")
    assert (ref.score, ref.latency_ms, ref.round_index, ref.regression_vs_parent) == (None, None, 0, False)


def test_depth_path_and_top_branch() -> None:
    wm = _tree(_node("a"), _node("b", "a"), _node("c", "b"))
    assert [n.id for n in wm.path_to("c")] == [ROOT_ID, "a", "b", "c"]
    assert (wm.depth(ROOT_ID), wm.depth("a"), wm.depth("c")) == (0, 1, 3)
    assert (wm.top_branch_id("c"), wm.top_branch_id("a"), wm.top_branch_id(ROOT_ID)) == ("a", "a", ROOT_ID)
    assert wm.subtree_ids("a") == {"a", "b", "c"} and wm.subtree_ids("c") == {"c"}


def test_is_initialised_once_any_node_has_an_action() -> None:
    assert not WorldModel().is_initialised
    assert _tree(_node("a", action=False), _node("b")).is_initialised
    assert not _tree(_node("a", action=False)).is_initialised


def test_a_node_is_pruned_when_it_or_any_ancestor_is() -> None:
    wm = _tree(_node("a", pruned=True), _node("b", "a"), _node("c"))
    assert wm.is_pruned("a") and wm.is_pruned("b") and not wm.is_pruned("c") and not wm.is_pruned(ROOT_ID)


def test_the_frontier_offers_open_actions_under_the_root_or_a_solved_parent() -> None:
    wm = _tree(
        _node("a"),  # open, under the root
        _node("b", status=NodeStatus.SOLVED, solution=_ref("b", 1.0)),
        _node("c", "b"),  # open, under a solved parent
        _node("d", "a"),  # open, but its parent is not solved
        _node("e", status=NodeStatus.FAILED),
        _node("f", pruned=True),
        _node("g", "f"),  # under a pruned node
        _node("h", action=False),  # no action
        _node("i", None),  # no parent
    )
    assert [n.id for n in wm.frontier()] == ["a", "c"]
    assert [n.id for n in wm.frontier(include_failed=True)] == ["a", "c", "e"]
    seeded = attach_seed(
        WorldModel(nodes={ROOT_ID: Node(id=ROOT_ID, action=Action(title="root action"))}), _ref("s", 1.0)
    )
    assert seeded.frontier() == []  # the root is never an action to run


def test_solved_nodes_and_the_best_node() -> None:
    wm = _tree(
        _node("a", status=NodeStatus.SOLVED, solution=_ref("a", 2.0)),
        _node("b", status=NodeStatus.SOLVED, solution=_ref("b", 3.0)),
        _node("c", status=NodeStatus.SOLVED, solution=_ref("c", None)),
        _node("d"),
    )
    assert [n.id for n in wm.solved_nodes()] == ["a", "b", "c"]
    assert wm.best_node().id == "b"
    assert wm.has_base_solution("a") and not wm.has_base_solution("d")
    tie = _tree(_node("y", solution=_ref("y", 3.0)), _node("x", solution=_ref("x", 3.0)))
    assert tie.best_node().id == "x"  # ties: the lowest id
    small = _tree(_node("a", solution=_ref("a", 0.5)), _node("b", solution=_ref("b", 0.25)))
    assert small.best_node().id == "a"  # scores below 1 order like any other
    zero = _tree(_node("a", solution=_ref("a", 0.0)), _node("b", solution=_ref("b", 0.5)))
    assert zero.best_node().id == "b"  # a score of 0 is the lowest, not a missing one
    assert _tree(_node("a", solution=_ref("a", None))).best_node() is None
    assert _tree(_node("a")).best_node() is None


def test_attach_solution_counts_a_cycle_and_clears_revived() -> None:
    wm = _tree(_node("a", cycles=2, failed_cycles=1, revived=True))
    after = attach_solution(wm, "a", _ref("a", 1.0))
    node = after.nodes["a"]
    assert (node.status, node.cycles, node.failed_cycles, node.revived) == (NodeStatus.SOLVED, 3, 1, False)
    assert node.solution == _ref("a", 1.0) and after.active_leaf_id == "a"
    assert wm.nodes["a"].cycles == 2  # pure: the original is unchanged


def test_mark_failed_counts_a_failed_cycle_and_clears_revived() -> None:
    wm = _tree(_node("a", cycles=2, failed_cycles=1, revived=True))
    node = mark_failed(wm, "a").nodes["a"]
    assert (node.status, node.cycles, node.failed_cycles, node.revived) == (NodeStatus.FAILED, 3, 2, False)
    assert mark_failed(wm, "a").active_leaf_id == "a"


def test_attach_seed_solves_the_root() -> None:
    seeded = attach_seed(WorldModel(), _ref("seed", 1.5))
    assert seeded.root.status == NodeStatus.SOLVED and seeded.root.solution.score == 1.5
