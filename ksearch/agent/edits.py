"""All-or-nothing application of an edit script (``edit_ops``) to the world model.

K-Search applies the LLM's edit ops one by one with ``dict.update``: a patch can forge a ``solution_ref``, an
inserted node can carry one, invalid ops are skipped silently and a failed validation is never rolled back
(weakness R4). Here the whole script is validated against the tree first, and it is applied only if *every* op is
valid. Otherwise the original tree comes back untouched with the full list of errors, so one repair prompt can fix
them all.

Everything here is pure: no I/O, no logging, deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ksearch.agent.edit_ops import (
    ActionPatch,
    DeleteNode,
    EditScript,
    InsertNode,
    NewNode,
    NodePatch,
    SplitNode,
    UpdateNode,
    format_validation_error,
    parse_edit_script,
)
from ksearch.agent.world_model import ROOT_ID, Action, Node, NodeStatus, WorldModel

# ---- outcome --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EditOutcome:
    """Result of applying a script: the new tree, or the unchanged original plus every error found."""

    world_model: WorldModel
    errors: list[str] = field(default_factory=list)
    new_node_ids: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def render_edit_errors(errors: list[str]) -> str:
    """A prompt section telling the planner why its script was rejected (empty when there is nothing to say)."""
    if not errors:
        return ""
    lines = [
        f"Your edit script was REJECTED and nothing was applied ({len(errors)} problem(s)).",
        "Fix every problem below and send the whole corrected script again:",
    ]
    lines.extend(f"- {error}" for error in errors)
    return "\n".join(lines)


# ---- application ------------------------------------------------------------------------------------------------


class _Session:
    """Working state while a script is applied to a copy of the node table."""

    def __init__(self, wm: WorldModel, script: EditScript, round_index: int, id_prefix: str) -> None:
        self.original = wm
        self.nodes: dict[str, Node] = dict(wm.nodes)
        self.errors: list[str] = []
        self.new_ids: list[str] = []
        self.round_index = round_index
        self.id_prefix = id_prefix
        self.next_k = 1
        self.explicit_ids = {c.id for c in _new_nodes(script) if c.id is not None}
        self.active_leaf_id = wm.active_leaf_id

    def taken(self, node_id: str) -> bool:
        return node_id in self.nodes or node_id in self.original.nodes

    def generate_id(self) -> str:
        while True:
            candidate = f"{self.id_prefix}{self.round_index}_{self.next_k}"
            self.next_k += 1
            if not self.taken(candidate) and candidate not in self.explicit_ids:
                return candidate

    def existing(self, where: str, node_id: str) -> Node | None:
        node = self.nodes.get(node_id)
        if node is None:
            self.errors.append(f"{where}: node '{node_id}' does not exist")
        return node


def _new_nodes(script: EditScript) -> list[NewNode]:
    out: list[NewNode] = []
    for op in script.ops:
        if isinstance(op, InsertNode):
            out.append(op.node)
        elif isinstance(op, SplitNode):
            out.extend(op.children)
    return out


def _patch_errors(where: str, node: Node, patch: NodePatch) -> list[str]:
    errors = []
    if node.id == ROOT_ID:
        for name in ("decision", "choice", "action", "revive"):
            if getattr(patch, name) is not None:
                errors.append(f"{where}.{name}: the root's {name} cannot be changed")
    if patch.revive and node.pruned:
        errors.append(f"{where}.revive: node '{node.id}' was pruned by a person; only a person can revive it")
    elif patch.revive and node.status != NodeStatus.FAILED:
        errors.append(f"{where}.revive: node '{node.id}' is {node.status.value}; only failed nodes can be revived")
    if patch.action is not None and node.action is None and patch.action.title is None:
        errors.append(f"{where}.action: node '{node.id}' has no action yet; a new action needs a title")
    return errors


def _merged_action(node: Node, patch: ActionPatch) -> Action:
    base = node.action.model_dump() if node.action is not None else {}
    return Action.model_validate({**base, **patch.model_dump(exclude_none=True)})


def _apply_patch(s: _Session, where: str, node_id: str, patch: NodePatch) -> None:
    node = s.nodes[node_id]
    errors = _patch_errors(where, node, patch)
    if errors:
        s.errors.extend(errors)
        return
    update: dict[str, Any] = {
        name: getattr(patch, name)
        for name in ("decision", "choice", "rating", "confidence", "notes")
        if getattr(patch, name) is not None
    }
    if patch.action is not None:
        try:
            update["action"] = _merged_action(node, patch.action)
        except ValidationError as exc:
            s.errors.extend(format_validation_error(exc, prefix=f"{where}.action: "))
            return
    if patch.revive:
        update.update(status=NodeStatus.OPEN, revived=True)
    s.nodes[node_id] = node.model_copy(update=update)


def _add_node(s: _Session, where: str, parent_id: str, new: NewNode) -> None:
    if new.id is not None and s.taken(new.id):
        s.errors.append(f"{where}.id: id '{new.id}' already exists")
        return
    node_id = new.id if new.id is not None else s.generate_id()
    s.nodes[node_id] = Node(
        id=node_id,
        parent_id=parent_id,
        decision=new.decision,
        choice=new.choice,
        action=new.action,
        rating=new.rating,
        confidence=new.confidence,
        notes=new.notes,
        created_round=s.round_index,
    )
    s.new_ids.append(node_id)


def _apply_update(s: _Session, i: int, op: UpdateNode) -> None:
    if s.existing(f"ops[{i}].node_id", op.node_id) is not None:
        _apply_patch(s, f"ops[{i}].patch", op.node_id, op.patch)


def _apply_insert(s: _Session, i: int, op: InsertNode) -> None:
    if s.existing(f"ops[{i}].parent_id", op.parent_id) is not None:
        _add_node(s, f"ops[{i}].node", op.parent_id, op.node)


def _apply_split(s: _Session, i: int, op: SplitNode) -> None:
    if s.existing(f"ops[{i}].node_id", op.node_id) is None:
        return
    if op.node_id == ROOT_ID:
        s.errors.append(f"ops[{i}].node_id: the root cannot be split (insert top-level nodes instead)")
        return
    if op.parent_patch is not None:
        _apply_patch(s, f"ops[{i}].parent_patch", op.node_id, op.parent_patch)
    for j, child in enumerate(op.children):
        _add_node(s, f"ops[{i}].children[{j}]", op.node_id, child)


def _apply_delete(s: _Session, i: int, op: DeleteNode) -> None:
    where = f"ops[{i}].node_id"
    node = s.existing(where, op.node_id)
    if node is None:
        return
    if node.id == ROOT_ID:
        s.errors.append(f"{where}: the root cannot be deleted")
    elif node.solution is not None:
        s.errors.append(f"{where}: node '{node.id}' has an attached solution and cannot be deleted")
    elif any(n.parent_id == node.id for n in s.nodes.values()):
        s.errors.append(f"{where}: node '{node.id}' has children; delete them first")
    elif node.pinned or node.pruned or node.by_person:
        s.errors.append(f"{where}: node '{node.id}' was added, pinned or pruned by a person and is kept")
    elif node.cycles > 0:
        # Its failure record is evidence: deleting it would let the same action be re-inserted as if untried.
        s.errors.append(f"{where}: node '{node.id}' has been tried ({node.cycles} cycles) and is kept as evidence")
    else:
        del s.nodes[node.id]
        if s.active_leaf_id == node.id:
            s.active_leaf_id = node.parent_id or ROOT_ID


_APPLIERS = {UpdateNode: _apply_update, InsertNode: _apply_insert, SplitNode: _apply_split, DeleteNode: _apply_delete}


def _growth_error(script: EditScript, max_new_nodes: int) -> str | None:
    count = len(_new_nodes(script))
    if count <= max_new_nodes:
        return None
    return f"ops: the script adds {count} new nodes (inserts plus split children); at most {max_new_nodes} allowed"


def _evidence_errors(original: WorldModel, nodes: dict[str, Node]) -> list[str]:
    """Belt and braces for R4: no surviving node may have its system-owned evidence changed."""
    errors = []
    for node_id, before in original.nodes.items():
        after = nodes.get(node_id)
        if after is None:
            continue
        revived = after.revived and before.status == NodeStatus.FAILED and after.status == NodeStatus.OPEN
        same = (
            before.solution,
            before.cycles,
            before.failed_cycles,
            before.pinned,
            before.pruned,
            before.by_person,
        ) == (
            after.solution,
            after.cycles,
            after.failed_cycles,
            after.pinned,
            after.pruned,
            after.by_person,
        )
        if not same or (before.status != after.status and not revived):
            errors.append(f"node '{node_id}': system-owned fields were changed by the script")
    return errors


def _finish(s: _Session, script: EditScript) -> WorldModel | None:
    if script.active_leaf_id is not None:
        if script.active_leaf_id in s.nodes:
            s.active_leaf_id = script.active_leaf_id
        else:
            s.errors.append(f"active_leaf_id: node '{script.active_leaf_id}' does not exist")
    s.errors.extend(_evidence_errors(s.original, s.nodes))
    if s.errors:
        return None
    update: dict[str, Any] = {"nodes": s.nodes, "active_leaf_id": s.active_leaf_id}
    if script.kernel_summary is not None:
        update["kernel_summary"] = script.kernel_summary
    if script.open_questions is not None:
        update["open_questions"] = list(script.open_questions)
    try:
        return WorldModel.model_validate(s.original.model_copy(update=update).model_dump())
    except ValidationError as exc:
        s.errors.extend(format_validation_error(exc, prefix="resulting world model: "))
        return None


def apply_edit_script(
    wm: WorldModel,
    script: EditScript | dict[str, Any] | str,
    *,
    round_index: int,
    max_new_nodes: int = 3,
    id_prefix: str = "n",
) -> EditOutcome:
    """Validate the whole script against ``wm`` and apply it atomically.

    Ops run in order on a working copy, so later ops may reference nodes inserted earlier in the same script.
    Every op is checked even after an error, so the planner sees all problems at once. On any error the original
    ``wm`` is returned unchanged.
    """
    parsed = parse_edit_script(script)
    if isinstance(parsed, list):
        return EditOutcome(world_model=wm, errors=parsed)
    session = _Session(wm, parsed, round_index, id_prefix)
    growth = _growth_error(parsed, max_new_nodes)
    if growth is not None:
        session.errors.append(growth)
    for i, op in enumerate(parsed.ops):
        _APPLIERS[type(op)](session, i, op)  # type: ignore[operator]
    result = _finish(session, parsed)
    if result is None:
        return EditOutcome(world_model=wm, errors=list(session.errors))
    return EditOutcome(world_model=result, errors=[], new_node_ids=list(session.new_ids))
