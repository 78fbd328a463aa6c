"""Which frontier action(s) to run next: a deterministic, explainable lexicographic rule.

K-Search sorts the frontier by (score desc, difficulty asc, rating desc, id asc) after a difficulty gate (spec 1.6).
Its weighted utility is dead code and it has no exploration term (weakness R12), so a branch the planner happens to
like can absorb every cycle. We keep the planner's score as the primary key (it is the only signal that knows what
the action *is*) and add one cheap exploration term where it cannot override the planner: among actions of *equal*
score, prefer the top-level branch that has consumed fewer cycles so far. Failed nodes stay out of the frontier
(``WorldModel.frontier``) until the planner revives them (R3).

Exploration slots (issue 57): in examples/trimul-record the cuBLAS-projection family was left after one cycle (the
planner scored its follow-up 0.2) and the only contraction idea (difficulty 5) stayed behind the difficulty gate for
all 24 rounds, so the score order alone never tested them. Every ``explore_every``-th cycle of a run therefore runs
the first action (in the order below, the gate ignored) of the family (a branch under the root) that has had the
fewest cycles, while another family has had more; a family is closed only when it has no open action left.

Pure and deterministic: no I/O, no randomness.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from ksearch.agent.world_model import Node, WorldModel


@dataclass(frozen=True)
class SelectionPolicy:
    """Knobs of the selection rule."""

    max_difficulty: int = 4
    """Actions above this difficulty are deferred while easier ones exist (they are never deleted)."""
    explore_every: int = 4
    """Every this-many-th cycle of the run is an exploration slot (0: none)."""


@dataclass(frozen=True)
class FrontierEntry:
    """One frontier action with every component of its sort key, for ``ksearch show`` and prompts."""

    rank: int
    """1-based position in selection order (eligible actions first, then deferred ones)."""
    node_id: str
    title: str
    score: float
    branch_id: str
    branch_cycles: int
    difficulty: int
    rating: float
    deferred: bool
    revived: bool
    pinned: bool = False
    explores: bool = False
    """The next exploration slot would run this action."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def family_cycles(wm: WorldModel) -> dict[str, int]:
    """Total cycles spent in each family (a top-level branch: the root's child and its subtree), a visit count."""
    return {child.id: sum(wm.nodes[i].cycles for i in wm.subtree_ids(child.id)) for child in wm.children(wm.root.id)}


def _sort_key(wm: WorldModel, node: Node, explored: dict[str, int]) -> tuple[bool, float, int, int, float, str]:
    """(pinned first, score desc, branch cycles asc, difficulty asc, rating desc, id asc); frontier nodes always
    have an action."""
    action = node.action
    assert action is not None
    branch = wm.top_branch_id(node.id)
    return (not node.pinned, -action.score, explored.get(branch, 0), action.difficulty, -node.rating, node.id)


def _is_deferred(node: Node, policy: SelectionPolicy) -> bool:
    """Above the difficulty gate; a person's pin overrides the gate."""
    return node.action is not None and not node.pinned and node.action.difficulty > policy.max_difficulty


def _ordered(wm: WorldModel, policy: SelectionPolicy, exclude: Iterable[str]) -> list[tuple[Node, bool]]:
    """Candidates in selection order, each with its deferred flag (none deferred when all would be)."""
    excluded = set(exclude)
    candidates = [n for n in wm.frontier() if n.id not in excluded]
    explored = family_cycles(wm)
    candidates.sort(key=lambda n: _sort_key(wm, n, explored))
    deferred = {n.id for n in candidates if _is_deferred(n, policy)}
    if len(deferred) == len(candidates):
        deferred = set()
    eligible = [(n, False) for n in candidates if n.id not in deferred]
    return eligible + [(n, True) for n in candidates if n.id in deferred]


def exploration_pick(wm: WorldModel, policy: SelectionPolicy, exclude: Iterable[str] = ()) -> Node | None:
    """The action an exploration slot runs: the first in selection order (the difficulty gate ignored) of the family
    with the fewest cycles among those with a frontier action, or None when no family has had fewer cycles than the
    most-explored one."""
    explored = family_cycles(wm)
    first_of: dict[str, Node] = {}
    for node, _ in _ordered(wm, policy, exclude):
        first_of.setdefault(wm.top_branch_id(node.id), node)
    if not first_of:
        return None
    order = list(first_of)  # every family with a frontier action is a root child: ``explored`` counts it
    family = min(order, key=lambda f: (explored[f], order.index(f)))
    if explored[family] >= max(explored.values()):
        return None
    return first_of[family]


def is_exploration_slot(cycle_number: int, policy: SelectionPolicy) -> bool:
    """Whether the run's ``cycle_number``-th cycle (1-based) is an exploration slot."""
    return policy.explore_every > 0 and cycle_number % policy.explore_every == 0


def select_actions(
    wm: WorldModel,
    n: int = 1,
    policy: SelectionPolicy = SelectionPolicy(),
    exclude: Iterable[str] = (),
    first_cycle: int | None = None,
) -> list[str]:
    """Up to ``n`` distinct frontier node ids to run next, best first.

    Order is lexicographic, never a weighted sum, so every decision can be explained in one line:

    0. actions a person pinned (``ksearch steer RUN pin NODE``) come first, and are never deferred.
    1. ``action.score`` descending: the planner's prior that the action pays off.
    2. cycles already spent in the node's top-level branch, ascending: breaks score ties toward under-explored
       branches, so equal bets are spread across the tree instead of deepening one line.
    3. difficulty ascending: cheaper experiments first.
    4. rating descending: the better partial plan.
    5. node id ascending: total, deterministic order.

    Difficulty gate: actions harder than ``policy.max_difficulty`` are deferred and not returned, unless every
    candidate would be deferred, in which case all are eligible (so a hard-only frontier does not stall the run).
    ``exclude`` removes ids already taken, e.g. by parallel workers.

    ``first_cycle``: the run's number of the first cycle these actions open (1-based). A slot whose cycle number is a
    multiple of ``policy.explore_every`` runs ``exploration_pick`` instead, when there is one. None: no slots.
    """
    if n <= 0:
        return []
    normal = [node.id for node, deferred in _ordered(wm, policy, exclude) if not deferred]
    picked: list[str] = []
    for slot in range(n):
        choice = None
        if first_cycle is not None and is_exploration_slot(first_cycle + slot, policy):
            explored = exploration_pick(wm, policy, [*exclude, *picked])
            choice = explored.id if explored is not None else None
        if choice is None:
            choice = next((node_id for node_id in normal if node_id not in picked), None)
        if choice is None:
            break
        picked.append(choice)
    return picked


def frontier_report(wm: WorldModel, policy: SelectionPolicy = SelectionPolicy()) -> list[FrontierEntry]:
    """Every frontier action in selection order with its sort-key components and whether it is deferred."""
    explored = family_cycles(wm)
    exploring = exploration_pick(wm, policy) if policy.explore_every > 0 else None
    out = []
    for rank, (node, deferred) in enumerate(_ordered(wm, policy, ()), start=1):
        action = node.action
        assert action is not None
        branch = wm.top_branch_id(node.id)
        out.append(
            FrontierEntry(
                rank=rank,
                node_id=node.id,
                title=action.title,
                score=action.score,
                branch_id=branch,
                branch_cycles=explored.get(branch, 0),
                difficulty=action.difficulty,
                rating=node.rating,
                deferred=deferred,
                revived=node.revived,
                pinned=node.pinned,
                explores=exploring is not None and exploring.id == node.id,
            )
        )
    return out
