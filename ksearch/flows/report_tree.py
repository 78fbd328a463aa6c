"""The report's view of the search tree: every node in depth-first order with its rounds and the diff of its code
against its parent's solution."""

from __future__ import annotations

import difflib
from typing import Any

from ksearch.agent.world_model import ROOT_ID, Node, WorldModel
from ksearch.flows.report_model import CandidatePoint, CodeDiff, DiffLine, NodeView
from ksearch.store import Store


def node_views(wm: WorldModel, points: list[CandidatePoint], store: Store) -> list[NodeView]:
    """The tree in depth-first order from the root (children by id), each node with its rounds and code diff."""
    order: list[tuple[str, int]] = []

    def walk(node_id: str, depth: int) -> None:
        order.append((node_id, depth))
        for child in wm.children(node_id):
            walk(child.id, depth + 1)

    walk(ROOT_ID, 0)
    seen = {n for n, _ in order}
    order += [(n, wm.depth(n)) for n in sorted(wm.nodes) if n not in seen]  # unreachable nodes: shown, never hidden
    codes: dict[str, str] = {}

    def code_of(candidate_id: str) -> str:
        if candidate_id not in codes:
            codes[candidate_id] = store.get_candidate(candidate_id).code
        return codes[candidate_id]

    views = []
    for node_id, depth in order:
        node = wm.nodes[node_id]
        rounds = [p for p in points if p.node_id == node_id]
        views.append(
            NodeView(
                id=node.id,
                parent_id=node.parent_id,
                depth=depth,
                status=node.status.value,
                decision=node.decision,
                choice=node.choice,
                title=node.action.title if node.action else None,
                description=node.action.description if node.action else "",
                difficulty=node.action.difficulty if node.action else None,
                planner_score=node.action.score if node.action else None,
                expected_speedup=node.action.expected_speedup if node.action else None,
                rationale=node.action.rationale if node.action else "",
                rating=node.rating,
                confidence=node.confidence,
                notes=node.notes,
                cycles=node.cycles,
                failed_cycles=node.failed_cycles,
                revived=node.revived,
                solution=node.solution,
                rounds=rounds,
                diff=_node_diff(wm, node, rounds, code_of),
                children=[c.id for c in wm.children(node_id)],
            )
        )
    return views


def _node_diff(wm: WorldModel, node: Node, rounds: list[CandidatePoint], code_of: Any) -> CodeDiff | None:
    if node.solution is not None:
        candidate_id, code_label = node.solution.candidate_id, "its attached solution"
    else:
        tried = [p for p in rounds if p.candidate_id]
        if not tried:
            return None
        candidate_id, code_label = (
            tried[-1].candidate_id,
            f"its last attempt (round {tried[-1].round_index}, {tried[-1].verdict})",
        )
    assert candidate_id is not None
    parent = wm.nodes.get(node.parent_id) if node.parent_id else None
    if node.id == ROOT_ID:
        base_id, base_label = None, "nothing: this is the seed kernel the search started from"
    elif parent is not None and parent.solution is not None:
        base_id = parent.solution.candidate_id
        base_label = (
            "the seed kernel (the root's solution)"
            if parent.id == ROOT_ID
            else f"the solution of its parent {parent.id}"
        )
    else:
        base_id, base_label = None, "nothing: written from the task spec (the parent has no code)"
    try:
        new = code_of(candidate_id)
        old = code_of(base_id) if base_id else ""
    except KeyError:
        return None
    return code_diff(
        old, new, candidate_id=candidate_id, code_label=code_label, base_label=base_label, base_candidate_id=base_id
    )


def code_diff(old: str, new: str, **labels: Any) -> CodeDiff:
    """A unified diff (difflib) of two sources, as typed lines for the HTML view."""
    lines: list[DiffLine] = []
    added = removed = 0
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), "parent", "node", lineterm="", n=3):
        if line.startswith(("---", "+++")):
            kind = "meta"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind, added = "add", added + 1
        elif line.startswith("-"):
            kind, removed = "del", removed + 1
        else:
            kind = "ctx"
        lines.append(DiffLine(kind=kind, text=line))
    return CodeDiff(lines=lines, added=added, removed=removed, **labels)
