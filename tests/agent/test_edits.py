"""Edit operations: each op, system-owned field protection, atomicity, and the structural rules."""

from __future__ import annotations

import json

import pytest

from ksearch.agent.edit_ops import (
    ActionPatch,
    EditScript,
    InsertNode,
    NewNode,
    NodePatch,
    UpdateNode,
    edit_script_json_schema,
)
from ksearch.agent.edits import apply_edit_script, render_edit_errors
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

REF = SolutionRef(candidate_id="cand-a", evaluation_id="eval-a", verdict="passed", score=2.0, round_index=1)


def _node(node_id: str, parent: str, score: float = 0.5, difficulty: int = 3) -> Node:
    return Node(
        id=node_id,
        parent_id=parent,
        decision=f"decision {node_id}",
        choice=f"choice {node_id}",
        action=Action(title=f"do {node_id}", score=score, difficulty=difficulty),
    )


@pytest.fixture
def wm() -> WorldModel:
    """root -> a (solved) -> a1 (open); root -> b (failed); root -> c (open, childless)."""
    nodes = {ROOT_ID: Node(id=ROOT_ID, decision="Kernel", choice="softmax")}
    for node in (_node("a", ROOT_ID), _node("a1", "a"), _node("b", ROOT_ID), _node("c", ROOT_ID)):
        nodes[node.id] = node
    tree = WorldModel(kernel_summary="row softmax", nodes=nodes)
    tree = attach_solution(tree, "a", REF)
    tree = mark_failed(tree, "b")
    return tree.model_copy(update={"active_leaf_id": "c"})


def _apply(wm: WorldModel, ops: list[dict], **extra) -> tuple:
    outcome = apply_edit_script(wm, {"ops": ops, **extra}, round_index=7)
    return outcome, outcome.world_model


def _assert_rejected_unchanged(wm: WorldModel, outcome) -> None:
    assert not outcome.ok
    assert outcome.world_model.model_dump() == wm.model_dump()
    assert outcome.new_node_ids == []


# ---- each op ------------------------------------------------------------------------------------------------------


def test_update_replaces_fields_and_merges_action(wm: WorldModel) -> None:
    outcome, new = _apply(
        wm,
        [{"op": "update", "node_id": "c", "patch": {"rating": 8.5, "notes": "promising", "action": {"score": 0.9}}}],
    )
    assert outcome.ok and outcome.errors == []
    node = new.nodes["c"]
    assert node.rating == 8.5 and node.notes == "promising"
    assert node.action is not None
    assert node.action.score == 0.9
    assert node.action.title == "do c" and node.action.difficulty == 3  # merged, not replaced
    assert node.decision == "decision c"  # untouched fields stay
    assert wm.nodes["c"].rating == 5.0  # the input tree is never mutated


def test_update_creating_an_action_requires_a_title(wm: WorldModel) -> None:
    base = wm.model_copy(update={"nodes": {**wm.nodes, "q": Node(id="q", parent_id=ROOT_ID, decision="question")}})
    outcome, _ = _apply(base, [{"op": "update", "node_id": "q", "patch": {"action": {"score": 0.8}}}])
    assert outcome.errors == ["ops[0].patch.action: node 'q' has no action yet; a new action needs a title"]
    outcome, new = _apply(base, [{"op": "update", "node_id": "q", "patch": {"action": {"title": "Vectorise loads"}}}])
    assert outcome.ok
    assert new.nodes["q"].action == Action(title="Vectorise loads")


def test_insert_creates_node_with_system_fields_set_by_code(wm: WorldModel) -> None:
    outcome, new = _apply(
        wm,
        [
            {
                "op": "insert",
                "parent_id": "a",
                "node": {"id": "a2", "decision": "Loads", "choice": "vectorised", "action": {"title": "Use 128-bit"}},
            }
        ],
    )
    assert outcome.ok
    assert outcome.new_node_ids == ["a2"]
    node = new.nodes["a2"]
    assert node.parent_id == "a"
    assert node.created_round == 7
    assert node.status == NodeStatus.OPEN and node.solution is None and node.cycles == 0
    assert node.action is not None and node.action.title == "Use 128-bit"
    assert [n.id for n in new.frontier()] == ["a1", "a2", "c"]


def test_insert_then_reference_in_same_script(wm: WorldModel) -> None:
    outcome, new = _apply(
        wm,
        [
            {"op": "insert", "parent_id": ROOT_ID, "node": {"id": "d", "action": {"title": "Tile"}}},
            {"op": "insert", "parent_id": "d", "node": {"id": "d1", "action": {"title": "Tile 2"}}},
            {"op": "update", "node_id": "d", "patch": {"rating": 9}},
        ],
        active_leaf_id="d1",
    )
    assert outcome.ok
    assert outcome.new_node_ids == ["d", "d1"]
    assert new.nodes["d1"].parent_id == "d"
    assert new.nodes["d"].rating == 9.0
    assert new.active_leaf_id == "d1"


def test_split_patches_parent_and_adds_children(wm: WorldModel) -> None:
    outcome, new = _apply(
        wm,
        [
            {
                "op": "split",
                "node_id": "c",
                "parent_patch": {"notes": "split into two steps", "action": {"difficulty": 2}},
                "children": [{"action": {"title": "step 1"}}, {"id": "c_two", "action": {"title": "step 2"}}],
            }
        ],
    )
    assert outcome.ok
    assert outcome.new_node_ids == ["n7_1", "c_two"]
    assert new.nodes["c"].notes == "split into two steps"
    assert new.nodes["c"].action is not None and new.nodes["c"].action.difficulty == 2
    assert [n.id for n in new.children("c")] == ["c_two", "n7_1"]
    assert all(new.nodes[i].created_round == 7 for i in ("n7_1", "c_two"))


def test_delete_removes_leaf_and_moves_active_leaf_to_parent(wm: WorldModel) -> None:
    outcome, new = _apply(wm, [{"op": "delete", "node_id": "c"}])
    assert outcome.ok
    assert "c" not in new.nodes
    assert new.active_leaf_id == ROOT_ID
    outcome, new = _apply(wm, [{"op": "delete", "node_id": "a1"}])
    assert outcome.ok and "a1" not in new.nodes and new.active_leaf_id == "c"


def test_script_level_fields_are_applied(wm: WorldModel) -> None:
    outcome, new = _apply(wm, [], kernel_summary="memory bound", open_questions=["is it L2 bound?"])
    assert outcome.ok
    assert new.kernel_summary == "memory bound"
    assert new.open_questions == ["is it L2 bound?"]
    outcome, new = _apply(wm, [])
    assert new.kernel_summary == "row softmax"  # None leaves it unchanged


def test_accepts_model_and_json_text(wm: WorldModel) -> None:
    script = EditScript(ops=[UpdateNode(op="update", node_id="c", patch=NodePatch(action=ActionPatch(score=0.1)))])
    text = "```json\n" + script.model_dump_json() + "\n```"
    for given in (script, text):
        action = apply_edit_script(wm, given, round_index=1).world_model.nodes["c"].action
        assert action is not None and action.score == 0.1
    bad = apply_edit_script(wm, "{not json", round_index=1)
    assert len(bad.errors) == 1 and bad.errors[0].startswith("script: invalid JSON at line 1")
    assert bad.world_model is wm


# ---- system-owned fields --------------------------------------------------------------------------------------------


def test_forged_solution_in_update_patch_is_rejected(wm: WorldModel) -> None:
    forged = {"candidate_id": "fake", "evaluation_id": "fake", "verdict": "passed", "score": 1e9}
    outcome, _ = _apply(wm, [{"op": "update", "node_id": "c", "patch": {"rating": 9, "solution": forged}}])
    assert outcome.errors == ["ops[0].patch: extra field 'solution' is not allowed (system-owned)"]
    _assert_rejected_unchanged(wm, outcome)


def test_forged_solution_in_inserted_node_is_rejected(wm: WorldModel) -> None:
    node = {"id": "x", "action": {"title": "t"}, "solution_ref": {"solution_id": "abc"}, "status": "solved"}
    outcome, _ = _apply(wm, [{"op": "insert", "parent_id": ROOT_ID, "node": node}])
    assert sorted(outcome.errors) == [
        "ops[0].node: extra field 'solution_ref' is not allowed (system-owned)",
        "ops[0].node: extra field 'status' is not allowed (system-owned)",
    ]
    _assert_rejected_unchanged(wm, outcome)


def test_forged_fields_anywhere_are_rejected(wm: WorldModel) -> None:
    ops = [
        {"op": "update", "node_id": "c", "patch": {"action": {"score": 0.2, "solution": {}}}},
        {"op": "split", "node_id": "c", "children": [{"action": {"title": "t"}, "cycles": 0}]},
        {"op": "update", "node_id": "c", "patch": {"cycles": 0, "foo": 1}},
    ]
    outcome, _ = _apply(wm, ops, solution={"x": 1})
    assert sorted(outcome.errors) == sorted(
        [
            "ops[0].patch.action: extra field 'solution' is not allowed (system-owned)",
            "ops[1].children[0]: extra field 'cycles' is not allowed (system-owned)",
            "ops[2].patch: extra field 'cycles' is not allowed (system-owned)",
            "ops[2].patch: extra field 'foo' is not allowed",
            "script: extra field 'solution' is not allowed (system-owned)",
        ]
    )
    _assert_rejected_unchanged(wm, outcome)


def test_edits_never_change_attached_solution(wm: WorldModel) -> None:
    outcome, new = _apply(wm, [{"op": "update", "node_id": "a", "patch": {"rating": 1, "action": {"score": 0.0}}}])
    assert outcome.ok
    assert new.nodes["a"].solution == REF
    assert new.nodes["a"].status == NodeStatus.SOLVED and new.nodes["a"].cycles == 1


# ---- atomicity -------------------------------------------------------------------------------------------------------


def test_half_invalid_script_leaves_tree_exactly_unchanged(wm: WorldModel) -> None:
    before = wm.model_dump()
    ops = [
        {"op": "update", "node_id": "c", "patch": {"rating": 9.0, "notes": "valid"}},
        {"op": "insert", "parent_id": ROOT_ID, "node": {"id": "e", "action": {"title": "valid insert"}}},
        {"op": "delete", "node_id": "a"},  # solved: invalid
        {"op": "update", "node_id": "ghost", "patch": {"rating": 1.0}},  # missing: invalid
    ]
    outcome = apply_edit_script(wm, {"ops": ops, "kernel_summary": "changed"}, round_index=3)
    assert outcome.errors == [
        "ops[2].node_id: node 'a' has an attached solution and cannot be deleted",
        "ops[3].node_id: node 'ghost' does not exist",
    ]
    assert outcome.world_model.model_dump() == before
    assert wm.model_dump() == before
    assert outcome.new_node_ids == []


def test_validation_errors_name_op_index_and_field(wm: WorldModel) -> None:
    ops = [
        {"op": "update", "node_id": "c", "patch": {"rating": 11}},
        {"op": "update_node", "node_id": "c", "patch": {}},
        {"op": "split", "node_id": "c", "children": []},
    ]
    outcome, _ = _apply(wm, ops)
    assert len(outcome.errors) == 3
    assert outcome.errors[0].startswith("ops[0].patch.rating: Input should be less than or equal to 10")
    assert outcome.errors[1].startswith("ops[1]: Input tag 'update_node' found using 'op'")
    assert outcome.errors[2].startswith("ops[2].children: List should have at least 1 item")
    _assert_rejected_unchanged(wm, outcome)


# ---- structural rules -----------------------------------------------------------------------------------------------


def test_root_protection(wm: WorldModel) -> None:
    ops = [
        {"op": "update", "node_id": ROOT_ID, "patch": {"decision": "x", "choice": "y", "action": {"title": "t"}}},
        {"op": "split", "node_id": ROOT_ID, "children": [{"action": {"title": "t"}}]},
        {"op": "delete", "node_id": ROOT_ID},
    ]
    outcome, _ = _apply(wm, ops)
    assert outcome.errors == [
        "ops[0].patch.decision: the root's decision cannot be changed",
        "ops[0].patch.choice: the root's choice cannot be changed",
        "ops[0].patch.action: the root's action cannot be changed",
        "ops[1].node_id: the root cannot be split (insert top-level nodes instead)",
        "ops[2].node_id: the root cannot be deleted",
    ]
    _assert_rejected_unchanged(wm, outcome)
    outcome, new = _apply(wm, [{"op": "update", "node_id": ROOT_ID, "patch": {"notes": "seed is naive"}}])
    assert outcome.ok and new.root.notes == "seed is naive" and new.root.decision == "Kernel"


def test_delete_rules(wm: WorldModel) -> None:
    cases = {
        "a": "ops[0].node_id: node 'a' has an attached solution and cannot be deleted",
        "ghost": "ops[0].node_id: node 'ghost' does not exist",
    }
    for node_id, error in cases.items():
        outcome, _ = _apply(wm, [{"op": "delete", "node_id": node_id}])
        assert outcome.errors == [error]
        _assert_rejected_unchanged(wm, outcome)
    # a node with children cannot go, until its children are deleted first (in the same script)
    unsolved_parent = wm.model_copy(update={"nodes": {**wm.nodes, "c1": _node("c1", "c")}})
    outcome, _ = _apply(unsolved_parent, [{"op": "delete", "node_id": "c"}])
    assert outcome.errors == ["ops[0].node_id: node 'c' has children; delete them first"]
    outcome, new = _apply(unsolved_parent, [{"op": "delete", "node_id": "c1"}, {"op": "delete", "node_id": "c"}])
    assert outcome.ok and "c" not in new.nodes and "c1" not in new.nodes
    # a deleted node cannot be referenced afterwards
    outcome, _ = _apply(wm, [{"op": "delete", "node_id": "c"}, {"op": "update", "node_id": "c", "patch": {}}])
    assert outcome.errors == ["ops[1].node_id: node 'c' does not exist"]


def test_growth_cap(wm: WorldModel) -> None:
    ops = [
        {"op": "insert", "parent_id": ROOT_ID, "node": {"action": {"title": "one"}}},
        {"op": "split", "node_id": "c", "children": [{"action": {"title": "two"}}, {"action": {"title": "three"}}]},
    ]
    outcome, new = _apply(wm, ops)
    assert outcome.ok and outcome.new_node_ids == ["n7_1", "n7_2", "n7_3"]
    outcome, _ = _apply(wm, [*ops, {"op": "insert", "parent_id": "a", "node": {"action": {"title": "four"}}}])
    assert outcome.errors == [
        "ops: the script adds 4 new nodes (inserts plus split children); at most 3 allowed",
    ]
    _assert_rejected_unchanged(wm, outcome)
    five = apply_edit_script(wm, {"ops": [*ops, *ops[:1], *ops[:1]]}, round_index=7, max_new_nodes=5)
    assert five.ok and len(five.new_node_ids) == 5


def test_revive_only_on_failed(wm: WorldModel) -> None:
    assert [n.id for n in wm.frontier()] == ["a1", "c"]
    outcome, new = _apply(wm, [{"op": "update", "node_id": "b", "patch": {"revive": True, "notes": "retry smaller"}}])
    assert outcome.ok
    assert new.nodes["b"].status == NodeStatus.OPEN and new.nodes["b"].revived is True
    assert new.nodes["b"].cycles == 1 and new.nodes["b"].failed_cycles == 1  # the evidence stays
    assert [n.id for n in new.frontier()] == ["a1", "b", "c"]
    for node_id, status in (("c", "open"), ("a", "solved")):
        outcome, _ = _apply(wm, [{"op": "update", "node_id": node_id, "patch": {"revive": True}}])
        assert outcome.errors == [
            f"ops[0].patch.revive: node '{node_id}' is {status}; only failed nodes can be revived"
        ]
        _assert_rejected_unchanged(wm, outcome)


def test_generated_ids_are_deterministic_and_skip_collisions(wm: WorldModel) -> None:
    taken = wm.model_copy(update={"nodes": {**wm.nodes, "n7_1": _node("n7_1", ROOT_ID)}})
    ops = [
        {"op": "insert", "parent_id": ROOT_ID, "node": {"action": {"title": "gen"}}},
        {"op": "insert", "parent_id": ROOT_ID, "node": {"id": "n7_2", "action": {"title": "explicit"}}},
        {"op": "insert", "parent_id": ROOT_ID, "node": {"action": {"title": "gen2"}}},
    ]
    outcome = apply_edit_script(taken, {"ops": ops}, round_index=7, max_new_nodes=5)
    assert outcome.ok
    assert outcome.new_node_ids == ["n7_3", "n7_2", "n7_4"]
    again = apply_edit_script(taken, {"ops": ops}, round_index=7, max_new_nodes=5)
    assert again.new_node_ids == outcome.new_node_ids
    prefixed = apply_edit_script(wm, {"ops": ops[:1]}, round_index=2, id_prefix="w")
    assert prefixed.new_node_ids == ["w2_1"]


def test_explicit_id_collisions_are_errors(wm: WorldModel) -> None:
    ops = [
        {"op": "insert", "parent_id": ROOT_ID, "node": {"id": "c", "action": {"title": "dup of existing"}}},
        {"op": "insert", "parent_id": ROOT_ID, "node": {"id": "z", "action": {"title": "first"}}},
        {"op": "insert", "parent_id": ROOT_ID, "node": {"id": "z", "action": {"title": "dup in script"}}},
    ]
    outcome, _ = _apply(wm, ops)
    assert outcome.errors == ["ops[0].node.id: id 'c' already exists", "ops[2].node.id: id 'z' already exists"]
    _assert_rejected_unchanged(wm, outcome)


def test_active_leaf_must_exist(wm: WorldModel) -> None:
    outcome, _ = _apply(wm, [], active_leaf_id="ghost")
    assert outcome.errors == ["active_leaf_id: node 'ghost' does not exist"]
    outcome, new = _apply(wm, [], active_leaf_id="a1")
    assert outcome.ok and new.active_leaf_id == "a1"


def test_insert_under_failed_node_is_allowed_but_not_on_frontier(wm: WorldModel) -> None:
    outcome, new = _apply(wm, [{"op": "insert", "parent_id": "b", "node": {"id": "b1", "action": {"title": "t"}}}])
    assert outcome.ok and new.nodes["b1"].parent_id == "b"
    assert "b1" not in {n.id for n in new.frontier()}


# ---- schema and rendering ------------------------------------------------------------------------------------------


def test_json_schema_is_closed_and_lists_the_ops() -> None:
    schema = edit_script_json_schema()
    json.dumps(schema)  # serialisable for prompts
    defs = schema["$defs"]
    assert {"UpdateNode", "InsertNode", "SplitNode", "DeleteNode", "NodePatch", "NewNode"} <= set(defs)
    assert defs["NodePatch"]["additionalProperties"] is False
    assert "solution" not in defs["NodePatch"]["properties"]
    assert set(schema["properties"]["ops"]["items"]["discriminator"]["mapping"]) == {
        "update",
        "insert",
        "split",
        "delete",
    }


def test_render_edit_errors() -> None:
    assert render_edit_errors([]) == ""
    text = render_edit_errors(["ops[0].node_id: node 'x' does not exist", "ops: too many"])
    assert text.splitlines() == [
        "Your edit script was REJECTED and nothing was applied (2 problem(s)).",
        "Fix every problem below and send the whole corrected script again:",
        "- ops[0].node_id: node 'x' does not exist",
        "- ops: too many",
    ]


def test_typed_models_forbid_extra_fields() -> None:
    with pytest.raises(ValueError):
        NewNode.model_validate({"action": {"title": "t"}, "solution": {}})
    with pytest.raises(ValueError):
        InsertNode.model_validate({"op": "insert", "parent_id": "root", "node": {}})  # action is required


def test_tried_failed_node_cannot_be_deleted():
    from ksearch.agent.world_model import Action, Node, WorldModel, mark_failed

    wm = WorldModel()
    wm = wm.model_copy(update={"nodes": {**wm.nodes, "a": Node(id="a", parent_id="root", action=Action(title="t"))}})
    wm = mark_failed(wm, "a")
    outcome = apply_edit_script(wm, {"ops": [{"op": "delete", "node_id": "a"}]}, round_index=1)
    assert not outcome.ok
    assert "kept as evidence" in outcome.errors[0]
    assert "a" in outcome.world_model.nodes


# ---- edges found by the mutation bench (bench/mutation.py) ----------------------------------------------------------


def test_deleting_the_active_leaf_moves_it_to_its_own_parent(wm: WorldModel) -> None:
    deep = wm.model_copy(update={"active_leaf_id": "a1"})
    outcome, new = _apply(deep, [{"op": "delete", "node_id": "a1"}])
    assert outcome.ok and new.active_leaf_id == "a"


def test_inserted_nodes_take_every_field_given_and_the_defaults_otherwise(wm: WorldModel) -> None:
    node = {"id": "n", "decision": "the decision", "choice": "the choice", "action": {"title": "t"}, "notes": "why"}
    outcome, new = _apply(wm, [{"op": "insert", "parent_id": "c", "node": node}])
    assert outcome.ok
    inserted = new.nodes["n"]
    assert (inserted.decision, inserted.choice, inserted.notes) == ("the decision", "the choice", "why")
    assert (inserted.rating, inserted.confidence, inserted.created_round, inserted.parent_id) == (5.0, 0.5, 7, "c")


def test_an_id_deleted_earlier_in_the_script_cannot_be_reused(wm: WorldModel) -> None:
    ops = [
        {"op": "delete", "node_id": "c"},
        {"op": "insert", "parent_id": ROOT_ID, "node": {"id": "c", "action": {"title": "t"}}},
    ]
    outcome, _ = _apply(wm, ops)
    assert outcome.errors == ["ops[1].node.id: id 'c' already exists"]


@pytest.mark.parametrize("flag", ["pinned", "pruned", "by_person"])
def test_each_mark_of_a_person_keeps_a_node_from_deletion(wm: WorldModel, flag: str) -> None:
    marked = wm.model_copy(update={"nodes": {**wm.nodes, "c": wm.nodes["c"].model_copy(update={flag: True})}})
    outcome, _ = _apply(marked, [{"op": "delete", "node_id": "c"}])
    assert outcome.errors == ["ops[0].node_id: node 'c' was added, pinned or pruned by a person and is kept"]


def test_a_pruned_node_may_still_be_edited_but_not_revived(wm: WorldModel) -> None:
    pruned = wm.model_copy(update={"nodes": {**wm.nodes, "c": wm.nodes["c"].model_copy(update={"pruned": True})}})
    outcome, new = _apply(pruned, [{"op": "update", "node_id": "c", "patch": {"notes": "later"}}])
    assert outcome.ok and new.nodes["c"].notes == "later"


def test_only_a_real_code_fence_is_stripped_and_a_fence_inside_the_json_survives(wm: WorldModel) -> None:
    from ksearch.agent.edit_ops import parse_edit_script

    summary = "uses ```tl.dot``` twice"
    fenced = '```json\n{\n  "ops": [],\n  "kernel_summary": "' + summary + '"\n}\n```'
    parsed = parse_edit_script(fenced)
    assert isinstance(parsed, EditScript) and parsed.kernel_summary == summary
    assert isinstance(parse_edit_script('``\n{"ops": []}'), list)  # two backticks are not a fence


def test_the_discriminator_tag_is_dropped_only_right_after_an_op_index() -> None:
    from ksearch.agent.edit_ops import _clean_loc

    assert _clean_loc(("ops", 2, "update", "patch", "rating")) == ["ops", 2, "patch", "rating"]
    assert _clean_loc(("ops", 2, "patch", "update")) == ["ops", 2, "patch", "update"]
    assert _clean_loc(("children", 2, "update")) == ["children", 2, "update"]
    assert _clean_loc(("ops", "x", "update")) == ["ops", "x", "update"]
    assert _clean_loc(("update",)) == ["update"]


def _changed(wm: WorldModel, node_id: str, **fields) -> dict[str, Node]:
    return {**wm.nodes, node_id: wm.nodes[node_id].model_copy(update=fields)}


@pytest.mark.parametrize(
    "fields",
    [
        {"solution": REF},
        {"cycles": 5},
        {"failed_cycles": 5},
        {"pinned": True},
        {"pruned": True},
        {"by_person": True},
        {"status": NodeStatus.SOLVED},
        {"status": NodeStatus.OPEN},
    ],
)
def test_the_evidence_check_catches_any_system_owned_change(wm: WorldModel, fields: dict) -> None:
    """Belt and braces behind the op schema: a tree whose evidence changed (here forged directly) is refused."""
    from ksearch.agent.edits import _evidence_errors

    node_id = "b" if fields.get("status") == NodeStatus.OPEN else "c"  # b is the failed node
    assert _evidence_errors(wm, _changed(wm, node_id, **fields)) == [
        f"node '{node_id}': system-owned fields were changed by the script"
    ]


def test_the_evidence_check_allows_only_a_revival_of_a_failed_node(wm: WorldModel) -> None:
    from ksearch.agent.edits import _evidence_errors

    assert _evidence_errors(wm, _changed(wm, "b", status=NodeStatus.OPEN, revived=True)) == []
    assert _evidence_errors(wm, _changed(wm, "c", status=NodeStatus.OPEN, revived=True)) == []  # open stays open
    assert _evidence_errors(wm, _changed(wm, "c", status=NodeStatus.FAILED, revived=True)) != []
    assert _evidence_errors(wm, _changed(wm, "b", status=NodeStatus.SOLVED, revived=True)) != []
    assert _evidence_errors(wm, _changed(wm, "a", status=NodeStatus.OPEN, revived=True)) != []  # a solved node
    assert _evidence_errors(wm, {k: v for k, v in wm.nodes.items() if k != "c"}) == []  # deleted nodes are not judged
    assert _evidence_errors(wm, _changed(wm, "c", notes="planner-owned")) == []
