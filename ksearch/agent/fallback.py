"""Deterministic tree repairs made by code when the planner leaves the search with nothing to run. Pure."""

from __future__ import annotations

from ksearch.agent.world_model import ROOT_ID, Action, Node, NodeStatus, WorldModel

CONTINUATION_TITLE = "Refine the best solution: find and remove its top bottleneck"
RESTART_TITLE = "Write the simplest correct kernel from the spec"


def ensure_frontier(wm: WorldModel, *, round_index: int) -> tuple[WorldModel, str | None]:
    """If no action can run, add one (under the best solved node, else the root). Returns the new id, if any."""
    if wm.frontier():
        return wm, None
    best = wm.best_node() or next(iter(sorted(wm.solved_nodes(), key=lambda n: n.id)), None)
    parent_id = best.id if best is not None else ROOT_ID
    title = CONTINUATION_TITLE if best is not None else RESTART_TITLE
    k = 0
    while f"auto{round_index}_{k}" in wm.nodes:
        k += 1
    node = Node(
        id=f"auto{round_index}_{k}",
        parent_id=parent_id,
        decision="Continue" if best is not None else "Restart",
        choice="Code-inserted continuation",
        action=Action(title=title, difficulty=2, score=0.35),
        rating=best.rating if best is not None else 5.0,
        confidence=max(0.2, best.confidence) if best is not None else 0.3,
        created_round=round_index,
        status=NodeStatus.OPEN,
    )
    return wm.model_copy(update={"nodes": {**wm.nodes, node.id: node}}), node.id
