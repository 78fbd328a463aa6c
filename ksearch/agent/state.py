"""The graph's typed state. Small on purpose: code and reports live in the store, the state holds their ids."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from ksearch.agent.cycle_logic import CycleProgress
from ksearch.agent.world_model import Action, WorldModel


class CycleResult(BaseModel):
    """What one cycle (one action, several rounds) produced, for prune and the next plan."""

    model_config = ConfigDict(extra="forbid")

    cycle_id: str
    node_id: str
    rounds: int
    passed: bool
    stop_reason: str
    base_score: float | None = None
    base_candidate_id: str | None = None
    """The parent's code the cycle started from (None: from the spec)."""
    best_candidate_id: str | None = None
    best_evaluation_id: str | None = None
    best_score: float | None = None
    last_candidate_id: str | None = None
    last_evaluation_id: str | None = None
    last_error: str | None = None
    promotion: str | None = None
    """What prune decided about the cycle's best, for the next plan (``promotion_line``); None before prune."""


def merge_cycle_results(left: list[CycleResult] | None, right: list[CycleResult] | None) -> list[CycleResult]:
    """Reducer: cycles append their result; prune clears the list by writing ``None``."""
    if right is None:
        return []
    return [*(left or []), *right]


class BestRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    candidate_id: str
    evaluation_id: str
    node_id: str
    score: float | None = None
    latency_ms: float | None = None


class SearchState(BaseModel):
    """The outer graph's state."""

    world_model: WorldModel = Field(default_factory=WorldModel)
    step: int = 0
    """Planning steps taken (one plan + edit_tree + its cycles + prune)."""
    rounds_used: int = 0
    cycles_started: int = 0
    plan_reply: dict | None = None
    """The planner's edit script as parsed JSON, awaiting validation by edit_tree."""
    plan_raw_reply: str | None = None
    """The planner's last raw reply, shown back to it when its script is rejected."""
    plan_error: str | None = None
    edit_errors: list[str] = Field(default_factory=list)
    edit_attempt: int = 0
    cycle_results: Annotated[list[CycleResult], merge_cycle_results] = Field(default_factory=list)
    evidence: list[CycleResult] = Field(default_factory=list)
    """The cycles that ended since the last plan: what the planner must learn from."""
    best: BestRef | None = None
    counter_requests: list[str] = Field(default_factory=list)
    """Node ids whose solutions' hardware counters the planner asked for (``EditScript.counters_for``), collected
    after the step's cycles and shown in the next plan."""
    done_reason: str | None = None
    approval_required: bool = False
    """A new best is promoted only after a person approves it (``--require-approval``, ``steer require-approval``)."""


class SiblingCycle(BaseModel):
    """Another cycle opened at the same step: its finished attempts are shown to this cycle's coder, so parallel cycles
    do not repeat each other's losing changes (issue 57: round 4 repeated round 2's)."""

    model_config = ConfigDict(extra="forbid")

    cycle_id: str
    node_id: str
    title: str
    base_candidate_id: str | None = None


class CycleState(BaseModel):
    """A cycle's own state: one action, rounds of write_kernel -> compile -> profile until it stagnates."""

    cycle_id: str
    node_id: str
    action: Action
    base_candidate_id: str | None = None
    """The parent's solution (or the seed on the root); None means start from the spec."""
    base_score: float | None = None
    attempt_budget: int = 1
    round_offset: int = 0
    tree_view: str = ""
    """The world model as text for the coder's prompt (rendered once per cycle; the tree itself stays outside)."""
    siblings: list[SiblingCycle] = Field(default_factory=list)
    """The other cycles opened at the same step."""
    attempt: int = 0
    prompt_kind: str | None = None
    candidate_id: str | None = None
    write_error: str | None = None
    compile_error: str | None = None
    evaluation_id: str | None = None
    progress: CycleProgress = Field(default_factory=CycleProgress)
    last_candidate_id: str | None = None
    last_evaluation_id: str | None = None
    last_error: str | None = None
    stop_reason: str | None = None
    halted: bool = False
    """The LLM budget ran out before this attempt's code was written: the attempt is not a round."""
    cycle_results: Annotated[list[CycleResult], merge_cycle_results] = Field(default_factory=list)


class CycleOutput(BaseModel):
    """Only the reducer key leaves a cycle, so parallel branches never write the parent's plain keys."""

    cycle_results: Annotated[list[CycleResult], merge_cycle_results] = Field(default_factory=list)
