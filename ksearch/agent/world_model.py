"""The world model: K-Search's decision tree of optimisation hypotheses, as typed data.

The LLM proposes and re-rates hypotheses (actions) through edit operations (see ``edits.py``). Everything that is
evidence (attached solutions, node status, attempt counts) is *system-owned*: only code writes it, through the
functions at the bottom of this module. All functions here are pure: they return new objects and never do I/O.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

ROOT_ID = "root"

NodeId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")]
NonEmptyStr = Annotated[str, StringConstraints(min_length=1, max_length=400)]
Rating = Annotated[float, Field(ge=0.0, le=10.0)]
UnitFloat = Annotated[float, Field(ge=0.0, le=1.0)]
Difficulty = Annotated[int, Field(ge=1, le=5)]
SkillId = Annotated[str, StringConstraints(pattern=r"^sk-[0-9a-f]{12}$")]


MAX_SWEEP_POINTS = 64
"""At most this many configs in one launch-parameter sweep: Triton's full benchmark costs about 125 ms per config
and shape (ksearch.tools.evaluator.worker.tuning), so 64 configs on 7 shapes stay under a minute after winnowing."""


class LaunchSweep(BaseModel):
    """A launch-parameter sweep as ONE action (issue 57: about 11 of examples/trimul-record's 24 rounds were one
    launch setting each): the coder writes one ``@triton.autotune`` over the grid, and the evaluator's autotuning
    times every config at each timed shape before the timed calls and keeps the best (``tuning``)."""

    model_config = ConfigDict(extra="forbid")

    kernel: NonEmptyStr
    """The ``@triton.jit`` kernel whose launch is swept."""
    params: dict[Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")], list[int]] = Field(
        min_length=1, max_length=6
    )
    """Parameter -> the values to try: constexpr block sizes and ``num_warps`` / ``num_stages``."""
    key: list[str] = Field(default_factory=list, max_length=6)
    """The kernel arguments the choice depends on (the autotune key); empty: the coder picks the shape arguments."""

    @model_validator(mode="after")
    def _bounded_grid(self) -> LaunchSweep:
        for name, values in self.params.items():
            if not 1 <= len(values) <= 8 or any(v <= 0 for v in values):
                raise ValueError(f"sweep parameter {name}: give 1 to 8 positive values")
        if self.points > MAX_SWEEP_POINTS:
            raise ValueError(f"the sweep has {self.points} configs; at most {MAX_SWEEP_POINTS} (drop values)")
        return self

    @property
    def points(self) -> int:
        return math.prod(len(v) for v in self.params.values())

    def describe(self) -> str:
        grid = ", ".join(f"{name} in {values}" for name, values in self.params.items())
        key = f", key={self.key}" if self.key else ""
        return f"{self.kernel}: {grid} ({self.points} configs{key})"


class Action(BaseModel):
    """One concrete, single-iteration optimisation step the coder can implement."""

    model_config = ConfigDict(extra="forbid")

    title: NonEmptyStr
    """Short imperative name, e.g. 'Fuse the max and sum passes into one online-softmax loop'."""
    description: str = ""
    """What to change in the code, precisely enough to implement in one round."""
    difficulty: Difficulty = 3
    """1 (trivial) .. 5 (research project)."""
    score: UnitFloat = 0.5
    """The planner's prior that this action pays off; the main selection key."""
    expected_speedup: Annotated[float, Field(gt=0.0, le=1000.0)] | None = None
    """Predicted speedup over the parent's solution (1.0 = no change)."""
    rationale: str = ""
    """Why the planner believes in it (bottleneck addressed, evidence)."""
    skill_id: SkillId | None = None
    """The library skill this action applies (from the prompt's skills section), if any: the coder gets its recipe
    and the cycle's outcome is recorded as evidence on the skill."""
    sweep: LaunchSweep | None = None
    """A launch-parameter sweep: the action is to tune this grid in one round, not to pick a setting by hand."""


class NodeStatus(StrEnum):
    """Lifecycle of a node; owned by code, never by the LLM."""

    OPEN = "open"
    """No cycle has produced a passing candidate for it yet (or it has no action)."""
    SOLVED = "solved"
    """A cycle for this action produced a passing candidate, attached as ``solution``."""
    FAILED = "failed"
    """A cycle for this action ended with nothing that passed; not selected again unless revived."""


class SolutionRef(BaseModel):
    """Evidence attached by code after a cycle: which candidate implements this node, and how it did."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    candidate_id: str
    evaluation_id: str
    verdict: str
    score: float | None = None
    """Task score, higher is better; None when the evaluation could not time (CPU interpreter)."""
    latency_ms: float | None = None
    round_index: int = 0
    regression_vs_parent: bool = False
    """True when this cycle's best is slower than the parent's solution beyond the noise band (K-Search attaches it
    anyway; it flagged any lower score, 1.7 % included, issue 57)."""
    vs_parent: float | None = None
    """The parent's latency over this one's (above 1: faster than the parent), when both were timed."""
    vs_parent_within_noise: bool = False
    """The difference to the parent is inside the noise band (``evidence_text.aggregate_change``)."""


class Node(BaseModel):
    """A decision-tree node. The root is a dummy holding the seed solution, if any."""

    model_config = ConfigDict(extra="forbid")

    id: NodeId
    parent_id: NodeId | None = None
    decision: str = ""
    """The question this node answers, e.g. 'Reduction strategy'."""
    choice: str = ""
    """The answer chosen at this node, e.g. 'one program per row, whole row in registers'."""
    action: Action | None = None
    rating: Rating = 5.0
    """Quality of the partial plan up to this node, 0..10."""
    confidence: UnitFloat = 0.5
    notes: str = ""
    created_round: int = 0
    # --- system-owned below: the edit operations cannot name these fields ---
    status: NodeStatus = NodeStatus.OPEN
    solution: SolutionRef | None = None
    cycles: int = 0
    """How many cycles have been run for this node's action."""
    failed_cycles: int = 0
    revived: bool = False
    """The planner deliberately re-opened this node after it failed."""
    # --- steering (``ksearch steer``): set by people through code, never by the planner ---
    pinned: bool = False
    """A person asked for this action to be chosen first while it can run."""
    pruned: bool = False
    """A person closed this node: neither it nor anything under it is chosen until a person revives it."""
    by_person: bool = False
    """A person added this hypothesis; the planner may refine it but not delete it."""

    @property
    def is_action(self) -> bool:
        return self.action is not None


class WorldModel(BaseModel):
    """The whole tree plus the planner's free-text understanding of the kernel."""

    model_config = ConfigDict(extra="forbid")

    kernel_summary: str = ""
    open_questions: list[str] = Field(default_factory=list)
    nodes: dict[str, Node] = Field(default_factory=lambda: {ROOT_ID: Node(id=ROOT_ID)})
    active_leaf_id: str = ROOT_ID

    # ---- queries -----------------------------------------------------------------------------------------------
    @property
    def root(self) -> Node:
        return self.nodes[ROOT_ID]

    @property
    def is_initialised(self) -> bool:
        """True once the planner has written at least one action."""
        return any(n.is_action for n in self.nodes.values())

    def children(self, node_id: str) -> list[Node]:
        return sorted((n for n in self.nodes.values() if n.parent_id == node_id), key=lambda n: n.id)

    def path_to(self, node_id: str) -> list[Node]:
        """Nodes from the root down to ``node_id`` (inclusive)."""
        path: list[Node] = []
        current: str | None = node_id
        while current is not None:
            node = self.nodes[current]
            path.append(node)
            current = node.parent_id
        return list(reversed(path))

    def depth(self, node_id: str) -> int:
        return len(self.path_to(node_id)) - 1

    def subtree_ids(self, node_id: str) -> set[str]:
        out = {node_id}
        frontier = [node_id]
        while frontier:
            current = frontier.pop()
            for child in self.children(current):
                out.add(child.id)
                frontier.append(child.id)
        return out

    def top_branch_id(self, node_id: str) -> str:
        """The root's child whose subtree holds ``node_id`` (the node itself for depth-1 nodes)."""
        path = self.path_to(node_id)
        return path[1].id if len(path) > 1 else ROOT_ID

    def has_base_solution(self, node_id: str) -> bool:
        return self.nodes[node_id].solution is not None

    def is_pruned(self, node_id: str) -> bool:
        """True when a person pruned this node or one of its ancestors."""
        return any(n.pruned for n in self.path_to(node_id))

    def frontier(self, *, include_failed: bool = False) -> list[Node]:
        """Open actions whose parent is the root or solved, outside pruned branches: the actions that can run now."""
        out = []
        for node in self.nodes.values():
            if not node.is_action or node.id == ROOT_ID or self.is_pruned(node.id):
                continue
            if node.status == NodeStatus.SOLVED:
                continue
            if node.status == NodeStatus.FAILED and not include_failed:
                continue
            parent = self.nodes[node.parent_id] if node.parent_id else None
            if parent is None:
                continue
            if parent.id == ROOT_ID or parent.status == NodeStatus.SOLVED:
                out.append(node)
        return sorted(out, key=lambda n: n.id)

    def solved_nodes(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.solution is not None]

    def best_node(self) -> Node | None:
        """The solved node with the highest score (ties: lowest id); None when nothing has a score."""
        scored = [n for n in self.solved_nodes() if n.solution and n.solution.score is not None]
        if not scored:
            return None
        return sorted(scored, key=lambda n: (-(n.solution.score or 0.0), n.id))[0]  # type: ignore[union-attr]


# ---- system-owned writes (pure) ---------------------------------------------------------------------------------


def attach_solution(wm: WorldModel, node_id: str, ref: SolutionRef) -> WorldModel:
    """Attach a cycle's passing candidate to its node and mark it solved."""
    node = wm.nodes[node_id]
    updated = node.model_copy(
        update={"solution": ref, "status": NodeStatus.SOLVED, "cycles": node.cycles + 1, "revived": False}
    )
    return wm.model_copy(update={"nodes": {**wm.nodes, node_id: updated}, "active_leaf_id": node_id})


def attach_seed(wm: WorldModel, ref: SolutionRef) -> WorldModel:
    """Attach a seed solution to the root (K-Search's continue-from-solution)."""
    root = wm.root.model_copy(update={"solution": ref, "status": NodeStatus.SOLVED})
    return wm.model_copy(update={"nodes": {**wm.nodes, ROOT_ID: root}})


def mark_failed(wm: WorldModel, node_id: str) -> WorldModel:
    """Record a cycle that produced nothing that passed: the action is closed until the planner revives it."""
    node = wm.nodes[node_id]
    updated = node.model_copy(
        update={
            "status": NodeStatus.FAILED,
            "cycles": node.cycles + 1,
            "failed_cycles": node.failed_cycles + 1,
            "revived": False,
        }
    )
    return wm.model_copy(update={"nodes": {**wm.nodes, node_id: updated}, "active_leaf_id": node_id})
