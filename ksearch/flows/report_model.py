"""The report model: a run (or several) read back from the workspace store as typed, plain data, for the ``report``
and ``serve`` flows to render (``report_render``); ``report_gather`` fills it.

Numbers that the store does not hold (a reference latency that was never measured, latencies of an untimed CPU run)
are reported as missing, with the reason.
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ksearch.agent.world_model import SolutionRef
from ksearch.contracts.counters import CounterReport
from ksearch.contracts.evaluation import KernelResources, RooflinePoint, ShapeProfile, Timing
from ksearch.flows.run_cost import RunCost

__all__ = [
    "CandidatePoint",
    "BestPoint",
    "CodeDiff",
    "ComparedSource",
    "DiffLine",
    "NodeView",
    "ShapeRow",
    "ShapeTable",
    "RoleUsage",
    "RunReport",
    "RunCost",
    "SettingDifference",
    "ComparisonReport",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CandidatePoint(_Model):
    """One round (one kernel written and evaluated), or the seed's evaluation (round 0)."""

    round_index: int
    cycle_id: str
    attempt: int
    node_id: str
    prompt_kind: str
    candidate_id: str | None
    evaluation_id: str | None
    verdict: str
    """An evaluation verdict, or ``no_code`` when the reply held no kernel."""
    score: float | None = None
    latency_ms: float | None = None
    """Only for a passed, timed evaluation."""
    configs_passed: int | None = None
    configs_total: int | None = None
    summary: str
    elapsed_s: float
    """Seconds from the run's creation to this round's record (wall time, including any pause before a resume)."""
    is_seed: bool = False
    is_run_best: bool = False


class BestPoint(_Model):
    """The best measured candidate so far (highest score) after a round."""

    round_index: int
    elapsed_s: float
    score: float
    latency_ms: float | None
    candidate_id: str
    node_id: str


class DiffLine(_Model):
    kind: Literal["add", "del", "ctx", "hunk", "meta"]
    text: str


class CodeDiff(_Model):
    """A node's code against the code it was written from."""

    candidate_id: str
    code_label: str
    """Which code of the node this is: its attached solution, or its last (failed) attempt."""
    base_label: str
    """What it is compared with: the parent's solution, the seed, or nothing (written from the task spec)."""
    base_candidate_id: str | None
    lines: list[DiffLine]
    added: int
    removed: int


class NodeView(_Model):
    """A world-model node with the evidence code attached to it."""

    id: str
    parent_id: str | None
    depth: int
    status: str
    decision: str
    choice: str
    title: str | None
    description: str
    difficulty: int | None
    planner_score: float | None
    """The planner's prior that the action pays off (0..1), not a measurement."""
    expected_speedup: float | None
    rationale: str
    rating: float
    confidence: float
    notes: str
    cycles: int
    failed_cycles: int
    revived: bool
    solution: SolutionRef | None
    rounds: list[CandidatePoint]
    diff: CodeDiff | None
    children: list[str]


class ShapeRow(_Model):
    config: str
    best: Timing | None = None
    roofline: RooflinePoint | None = None
    """The best kernel's position against the GPU's roofline on this shape."""
    seed: Timing | None = None
    reference: Timing | None = None

    @property
    def speedup_vs_seed(self) -> float | None:
        return _ratio(self.seed, self.best)

    @property
    def speedup_vs_reference(self) -> float | None:
        return _ratio(self.reference, self.best)


class ComparedSource(_Model):
    """The seed or the reference: whether the store holds a measurement of it, and what it is."""

    label: str
    available: bool
    note: str
    latency_ms: float | None = None


class ShapeTable(_Model):
    """The best kernel's per-benchmark-config latencies next to the seed's and the reference's."""

    best_summary: str | None
    timed: bool
    note: str
    rows: list[ShapeRow]
    seed: ComparedSource
    reference: ComparedSource


class RoleUsage(_Model):
    role: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    latency_s: float
    retries: int
    replayed: int
    errors: int


class RunReport(_Model):
    """Everything the report shows about one run."""

    run_id: str
    task: str
    model: str
    device: str
    language: str
    status: str
    done_reason: str | None
    error: str | None
    created_at: float
    updated_at: float
    rounds_used: int
    max_rounds: int | None
    parent_run_id: str | None
    timed: bool
    """True when at least one candidate carries a measured latency."""
    timing_note: str
    """Why there are no latencies (CPU interpreter, nothing passed yet), empty when timed."""
    points: list[CandidatePoint]
    best_curve: list[BestPoint]
    best_candidate_id: str | None
    best_node_id: str | None
    best_summary: str | None
    best_latency_ms: float | None
    best_score: float | None
    best_code: str | None
    kernel_summary: str
    open_questions: list[str]
    nodes: list[NodeView]
    shapes: ShapeTable
    usage: list[RoleUsage]
    usage_total: RoleUsage
    cost: RunCost
    best_profile: list[ShapeProfile] = Field(default_factory=list)
    """The best kernel's profile of one call per timed shape."""
    best_resources: list[KernelResources] = Field(default_factory=list)
    best_counters: CounterReport | None = None
    """The best kernel's hardware counters (Nsight Compute), or why there are none; None when none were asked."""
    settings: dict[str, str]
    environment: dict[str, str]
    environment_source: str
    generated_at: float = Field(default_factory=time.time)

    @property
    def passed_rounds(self) -> int:
        return sum(1 for p in self.points if p.verdict == "passed" and not p.is_seed)

    @property
    def first_pass_round(self) -> int | None:
        return next((p.round_index for p in self.points if p.verdict == "passed" and not p.is_seed), None)


class SettingDifference(_Model):
    key: str
    values: list[str]
    """One value per run, in the order of the comparison's runs ('' where a run lacks the key)."""


class ComparisonReport(_Model):
    runs: list[RunReport]
    differing_settings: list[SettingDifference]
    generated_at: float = Field(default_factory=time.time)


def _ratio(slow: Timing | None, fast: Timing | None) -> float | None:
    if slow is None or fast is None or fast.median_ms <= 0:
        return None
    return slow.median_ms / fast.median_ms
