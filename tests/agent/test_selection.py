"""Selection: the lexicographic order, the difficulty gate, failed nodes, exploration tie-break, top-N."""

from __future__ import annotations

from ksearch.agent.selection import FrontierEntry, SelectionPolicy, frontier_report, select_actions
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


def _node(node_id: str, parent: str = ROOT_ID, *, score: float = 0.5, difficulty: int = 3, rating: float = 5.0) -> Node:
    action = Action(title=f"do {node_id}", score=score, difficulty=difficulty)
    return Node(id=node_id, parent_id=parent, action=action, rating=rating)


def _tree(*nodes: Node) -> WorldModel:
    return WorldModel(nodes={ROOT_ID: Node(id=ROOT_ID), **{n.id: n for n in nodes}})


def _ref(node_id: str) -> SolutionRef:
    return SolutionRef(candidate_id=f"c-{node_id}", evaluation_id=f"e-{node_id}", verdict="passed", score=1.0)


def test_score_is_the_primary_key() -> None:
    wm = _tree(_node("a", score=0.4, difficulty=1, rating=10), _node("b", score=0.9, difficulty=4, rating=0))
    assert select_actions(wm) == ["b"]


def test_lexicographic_order_of_the_remaining_keys() -> None:
    wm = _tree(
        _node("e", score=0.7, difficulty=2, rating=6),
        _node("d", score=0.7, difficulty=2, rating=6),  # ties with e except id: id asc
        _node("c", score=0.7, difficulty=2, rating=8),  # higher rating wins among equal difficulty
        _node("b", score=0.7, difficulty=1, rating=1),  # lower difficulty beats any rating
        _node("a", score=0.8, difficulty=4, rating=0),  # higher score beats everything
    )
    assert select_actions(wm, n=10) == ["a", "b", "c", "d", "e"]
    report = frontier_report(wm)
    assert [e.node_id for e in report] == ["a", "b", "c", "d", "e"]
    assert [e.rank for e in report] == [1, 2, 3, 4, 5]
    assert report[2].as_dict() == {
        "rank": 3,
        "node_id": "c",
        "title": "do c",
        "score": 0.7,
        "branch_id": "c",
        "branch_cycles": 0,
        "difficulty": 2,
        "rating": 8.0,
        "deferred": False,
        "revived": False,
        "pinned": False,
        "explores": False,
    }


def test_difficulty_gate_defers_hard_actions() -> None:
    wm = _tree(_node("hard", score=0.95, difficulty=5), _node("easy", score=0.3, difficulty=2))
    assert select_actions(wm, n=5) == ["easy"]
    assert select_actions(wm, policy=SelectionPolicy(max_difficulty=5)) == ["hard"]
    report = frontier_report(wm)
    assert [(e.node_id, e.deferred) for e in report] == [("easy", False), ("hard", True)]


def test_all_deferred_fallback_makes_everything_eligible() -> None:
    wm = _tree(_node("h1", score=0.2, difficulty=5), _node("h2", score=0.6, difficulty=5))
    assert select_actions(wm, n=5) == ["h2", "h1"]
    assert [e.deferred for e in frontier_report(wm)] == [False, False]
    # the fallback is judged after exclusion: excluding the only easy action un-defers the hard ones
    wm2 = _tree(_node("easy", score=0.1, difficulty=2), _node("hard", score=0.9, difficulty=5))
    assert select_actions(wm2, exclude=["easy"]) == ["hard"]
    assert select_actions(wm2) == ["easy"]


def test_failed_nodes_are_never_chosen_unless_revived() -> None:
    wm = _tree(_node("best", score=1.0), _node("other", score=0.1))
    wm = mark_failed(wm, "best")
    assert select_actions(wm, n=5) == ["other"]
    assert [e.node_id for e in frontier_report(wm)] == ["other"]
    only_failed = mark_failed(wm, "other")
    assert select_actions(only_failed, n=5) == []
    revived_node = wm.nodes["best"].model_copy(update={"status": NodeStatus.OPEN, "revived": True})
    revived = wm.model_copy(update={"nodes": {**wm.nodes, "best": revived_node}})
    assert select_actions(revived) == ["best"]
    assert frontier_report(revived)[0].revived is True


def test_children_of_unsolved_nodes_are_blocked_until_parent_is_solved() -> None:
    wm = _tree(_node("p", score=0.2), _node("kid", parent="p", score=1.0))
    assert select_actions(wm, n=5) == ["p"]
    solved = attach_solution(wm, "p", _ref("p"))
    assert select_actions(solved, n=5) == ["kid"]


def test_equal_scores_break_toward_less_explored_branch() -> None:
    # branch A has spent 3 cycles (a solved after 1, a_fail failed twice); branch B has spent 1
    wm = _tree(
        _node("a"),
        _node("a_next", parent="a", score=0.6, difficulty=4, rating=0),
        _node("a_fail", parent="a"),
        _node("b"),
        _node("b_next", parent="b", score=0.6, difficulty=4, rating=0),
        _node("z_fresh", score=0.6, difficulty=5, rating=0),
    )
    wm = attach_solution(wm, "a", _ref("a"))
    wm = mark_failed(mark_failed(wm, "a_fail"), "a_fail")
    wm = attach_solution(wm, "b", _ref("b"))
    assert select_actions(wm, n=3, policy=SelectionPolicy(max_difficulty=5)) == ["z_fresh", "b_next", "a_next"]
    report = {e.node_id: e for e in frontier_report(wm, SelectionPolicy(max_difficulty=5))}
    assert (report["a_next"].branch_id, report["a_next"].branch_cycles) == ("a", 3)
    assert (report["b_next"].branch_id, report["b_next"].branch_cycles) == ("b", 1)
    assert (report["z_fresh"].branch_id, report["z_fresh"].branch_cycles) == ("z_fresh", 0)
    # exploration only breaks ties: a higher score in the explored branch still wins
    bumped = wm.nodes["a_next"].model_copy(update={"action": Action(title="x", score=0.61, difficulty=4)})
    wm2 = wm.model_copy(update={"nodes": {**wm.nodes, "a_next": bumped}})
    assert select_actions(wm2, policy=SelectionPolicy(max_difficulty=5)) == ["a_next"]


def test_top_n_exclude_and_degenerate_n() -> None:
    wm = _tree(*[_node(f"x{i}", score=i / 10) for i in range(1, 6)])
    assert select_actions(wm, n=3) == ["x5", "x4", "x3"]
    assert select_actions(wm, n=3, exclude={"x5", "x3"}) == ["x4", "x2", "x1"]
    assert select_actions(wm, n=99) == ["x5", "x4", "x3", "x2", "x1"]
    assert select_actions(wm, n=0) == []
    assert select_actions(_tree()) == []
    assert frontier_report(_tree()) == []


def test_selection_is_deterministic_regardless_of_insertion_order() -> None:
    nodes = [_node("a", score=0.5), _node("b", score=0.5), _node("c", score=0.5)]
    first = select_actions(_tree(*nodes), n=3)
    second = select_actions(_tree(*reversed(nodes)), n=3)
    assert first == second == ["a", "b", "c"]


def test_a_frontier_entry_is_unpinned_unless_said_and_the_default_gate_is_difficulty_4() -> None:
    entry = FrontierEntry(
        rank=1,
        node_id="a",
        title="t",
        score=0.5,
        branch_id="a",
        branch_cycles=0,
        difficulty=3,
        rating=5.0,
        deferred=False,
        revived=False,
    )
    assert entry.pinned is False and entry.as_dict()["pinned"] is False
    assert entry.explores is False
    assert SelectionPolicy().max_difficulty == 4 and SelectionPolicy().explore_every == 4


def _record_tree() -> WorldModel:
    """examples/trimul-record at round 17: the gemmepi family had every cycle but one; hybrid's follow-up scored 0.2;
    the contraction idea (difficulty 5) stood alone in its family."""
    wm = _tree(
        _node("gemmepi", score=0.7, difficulty=3),
        _node("hybrid", score=0.65, difficulty=2),
        _node("tritonbmm", score=0.3, difficulty=5),
        _node("fusedout", "gemmepi", score=0.6, difficulty=1),
        _node("fusedbig", "gemmepi", score=0.5, difficulty=1),
        _node("hybrid_og", "hybrid", score=0.2, difficulty=2),
    )
    wm = attach_solution(wm, "gemmepi", _ref("gemmepi"))
    wm = attach_solution(wm, "hybrid", _ref("hybrid"))
    nodes = dict(wm.nodes)
    nodes["gemmepi"] = nodes["gemmepi"].model_copy(update={"cycles": 8})
    return wm.model_copy(update={"nodes": nodes})


def test_an_exploration_slot_runs_the_least_explored_family_whatever_its_score_or_difficulty() -> None:
    """Issue 57: the score order never ran tritonbmm (difficulty 5) or hybrid_og (score 0.2) in 24 rounds."""
    wm = _record_tree()
    policy = SelectionPolicy(max_difficulty=4, explore_every=4)
    assert select_actions(wm, 2, policy) == ["fusedout", "fusedbig"]  # no cycle numbers: no exploration
    assert select_actions(wm, 2, policy, first_cycle=5) == ["fusedout", "fusedbig"]  # cycles 5 and 6: no slot
    # cycle 8 is a slot: the family with no cycle (tritonbmm's) runs, above the gate and at score 0.3
    assert select_actions(wm, 2, policy, first_cycle=7) == ["fusedout", "tritonbmm"]
    assert select_actions(wm, 1, policy, first_cycle=8) == ["tritonbmm"]
    # once it has had its cycle, hybrid (1 cycle, its follow-up scored 0.2) is the least explored
    ran = wm.model_copy(
        update={"nodes": {**wm.nodes, "tritonbmm": wm.nodes["tritonbmm"].model_copy(update={"cycles": 2})}}
    )
    ran = mark_failed(ran, "tritonbmm")
    assert select_actions(ran, 1, policy, first_cycle=12) == ["hybrid_og"]
    assert select_actions(wm, 2, SelectionPolicy(explore_every=0), first_cycle=7) == ["fusedout", "fusedbig"]
    report = {e.node_id: e for e in frontier_report(wm, policy)}
    assert report["tritonbmm"].explores and report["tritonbmm"].deferred
    assert not any(e.explores for e in report.values() if e.node_id != "tritonbmm")


def test_no_exploration_while_every_family_has_had_as_many_cycles() -> None:
    wm = _tree(_node("a", score=0.9), _node("b", score=0.1))
    policy = SelectionPolicy(explore_every=1)
    assert select_actions(wm, 2, policy, first_cycle=1) == ["a", "b"]  # both at 0 cycles: the score order
    assert frontier_report(wm, policy)[1].explores is False
    # an exploration pick is never a node already taken in the same step
    wm = _tree(_node("a", score=0.9), _node("b", score=0.1), _node("c", "a", score=0.8))
    wm = attach_solution(wm, "a", _ref("a"))
    assert select_actions(wm, 2, policy, first_cycle=1) == ["b", "c"]


def test_families_with_as_many_cycles_are_not_explored_even_past_the_gate() -> None:
    """Equal cycles: the slot keeps the score order, so a deferred action of a tied family does not jump the gate."""
    wm = _tree(_node("a", score=0.9), _node("b", score=0.1))
    wm = attach_solution(attach_solution(wm, "a", _ref("a")), "b", _ref("b"))
    wm = wm.model_copy(
        update={
            "nodes": {
                **wm.nodes,
                "a2": _node("a2", "a", score=0.9, difficulty=5),
                "b2": _node("b2", "b", score=0.4, difficulty=2),
            }
        }
    )
    policy = SelectionPolicy(max_difficulty=4, explore_every=1)
    assert select_actions(wm, 1, policy, first_cycle=1) == ["b2"]
    assert not any(e.explores for e in frontier_report(wm, policy))
    lopsided = _record_tree()
    assert not any(e.explores for e in frontier_report(lopsided, SelectionPolicy(explore_every=0)))
