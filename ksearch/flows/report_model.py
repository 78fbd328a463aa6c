"""The report model: a run (or several) read back from the workspace store as typed, plain data, for the ``report``
and ``serve`` flows to render (``report_render``).

Gathering is pure reading: nothing is evaluated or measured here. Numbers that the store does not hold (a reference
latency that was never measured, latencies of an untimed CPU run) are reported as missing, with the reason.
"""

from __future__ import annotations

import difflib
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ksearch.agent.world_model import ROOT_ID, Node, SolutionRef, WorldModel
from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation, KernelResources, RooflinePoint, ShapeProfile, Timing
from ksearch.flows.run_config import SEED_CYCLE_ID
from ksearch.flows.run_cost import RunCost, run_cost
from ksearch.store import Store

__all__ = [
    "CandidatePoint", "BestPoint", "CodeDiff", "NodeView", "ShapeRow", "ShapeTable", "RoleUsage", "RunReport", "RunCost",
    "ComparisonReport", "gather_run_report", "gather_comparison",
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


# ---- gathering -------------------------------------------------------------------------------------------------


def gather_run_report(store: Store, run_id: str) -> RunReport:
    """Read one run (a unique id prefix is enough) from the store into a ``RunReport``."""
    run = store.get_run(run_id)
    run_id = run["id"]
    config: dict[str, Any] = run["config"] or {}
    evaluations = _EvaluationCache(store)
    attempts = store.list_attempts(run_id)
    points = [_point(a, run, evaluations) for a in attempts]
    snapshots = store.list_snapshots(run_id)
    wm = WorldModel.model_validate_json(snapshots[-1]["world_model"]) if snapshots else WorldModel()

    best_eval = evaluations.get(run["best_evaluation_id"])
    best_node_id = next((p.node_id for p in points if p.is_run_best), None)
    timed = any(p.latency_ms is not None for p in points)
    usage, total = _usage(store.list_llm_call_stats(run_id))
    env_eval, env_source = _environment_source(best_eval, points, evaluations)
    return RunReport(
        run_id=run_id,
        task=run["task"],
        model=run["model"],
        device=run["device"],
        language=run["language"] or "",
        status=run["status"],
        done_reason=run["done_reason"],
        error=run["error"],
        created_at=run["created_at"],
        updated_at=run["updated_at"],
        rounds_used=run["rounds_used"] or 0,
        max_rounds=config.get("max_rounds"),
        parent_run_id=run["parent_run_id"],
        timed=timed,
        timing_note="" if timed else _timing_note(run["device"], points),
        points=points,
        best_curve=_best_curve(points),
        best_candidate_id=run["best_candidate_id"],
        best_node_id=best_node_id,
        best_summary=best_eval.summary() if best_eval else None,
        best_latency_ms=best_eval.latency_ms if best_eval else None,
        best_score=run["best_score"],
        best_code=store.get_candidate(run["best_candidate_id"]).code if run["best_candidate_id"] else None,
        kernel_summary=wm.kernel_summary,
        open_questions=list(wm.open_questions),
        nodes=_nodes(wm, points, store),
        shapes=_shape_table(store, run, best_eval, points, evaluations),
        usage=usage,
        usage_total=total,
        cost=run_cost(store, run),
        best_profile=list(best_eval.profile) if best_eval else [],
        best_resources=list(best_eval.resources) if best_eval else [],
        settings=_settings(run, config),
        environment=dict(env_eval.environment) if env_eval else {},
        environment_source=env_source,
    )


def gather_comparison(store: Store, run_ids: list[str]) -> ComparisonReport:
    reports = [gather_run_report(store, r) for r in run_ids]
    keys = sorted({k for r in reports for k in r.settings})
    differing = []
    for key in keys:
        values = [r.settings.get(key, "") for r in reports]
        if key not in ("run_id",) and len(set(values)) > 1:
            differing.append(SettingDifference(key=key, values=values))
    return ComparisonReport(runs=reports, differing_settings=differing)


class _EvaluationCache:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._cache: dict[str, Evaluation] = {}

    def get(self, evaluation_id: str | None) -> Evaluation | None:
        if not evaluation_id:
            return None
        if evaluation_id not in self._cache:
            try:
                self._cache[evaluation_id] = self.store.get_evaluation(evaluation_id)
            except KeyError:
                return None
        return self._cache[evaluation_id]


def _point(a: dict[str, Any], run: dict[str, Any], evaluations: _EvaluationCache) -> CandidatePoint:
    ev = evaluations.get(a["evaluation_id"])
    timed_pass = ev is not None and ev.passed and ev.timed and ev.latency_ms is not None
    summary = ev.summary() if ev else (a["error"] or a["verdict"] or "")
    return CandidatePoint(
        round_index=a["round_index"],
        cycle_id=a["cycle_id"],
        attempt=a["attempt"],
        node_id=a["node_id"] or "",
        prompt_kind=a["prompt_kind"] or "",
        candidate_id=a["candidate_id"],
        evaluation_id=a["evaluation_id"],
        verdict=a["verdict"] or "unknown",
        score=ev.score if timed_pass and ev is not None else None,
        latency_ms=ev.latency_ms if timed_pass and ev is not None else None,
        configs_passed=ev.configs_passed if ev else None,
        configs_total=ev.configs_total if ev else None,
        summary=summary,
        elapsed_s=max(0.0, (a["created_at"] or run["created_at"]) - run["created_at"]),
        is_seed=a["cycle_id"] == SEED_CYCLE_ID,
        is_run_best=a["candidate_id"] is not None and a["candidate_id"] == run["best_candidate_id"],
    )


def _best_curve(points: list[CandidatePoint]) -> list[BestPoint]:
    """After every round from the first measured pass on: the highest-scoring candidate so far."""
    best: CandidatePoint | None = None
    curve = []
    for p in points:
        if p.score is not None and (best is None or best.score is None or p.score > best.score):
            best = p
        if best is not None and best.score is not None and best.candidate_id is not None:
            curve.append(
                BestPoint(round_index=p.round_index, elapsed_s=p.elapsed_s, score=best.score,
                          latency_ms=best.latency_ms, candidate_id=best.candidate_id, node_id=best.node_id)  # fmt: skip
            )
    return curve


def _timing_note(device: str, points: list[CandidatePoint]) -> str:
    if device == "cpu":
        return "correctness only, not timed: kernels ran under the Triton interpreter on the CPU"
    if not any(p.verdict == "passed" for p in points):
        return "not timed yet: no candidate has passed"
    return "not timed: no passed candidate carries a latency"


def _environment_source(
    best_eval: Evaluation | None, points: list[CandidatePoint], evaluations: _EvaluationCache
) -> tuple[Evaluation | None, str]:
    if best_eval is not None:
        return best_eval, "the best kernel's evaluation"
    for p in reversed(points):
        ev = evaluations.get(p.evaluation_id)
        if ev is not None:
            return ev, f"the evaluation of round {p.round_index} (no best kernel yet)"
    return None, "no evaluation yet"


def _usage(calls: list[dict[str, Any]]) -> tuple[list[RoleUsage], RoleUsage]:
    def zero(role: str) -> RoleUsage:
        return RoleUsage(role=role, calls=0, input_tokens=0, output_tokens=0, cost_usd=0.0, latency_s=0.0,
                         retries=0, replayed=0, errors=0)  # fmt: skip

    roles: dict[str, RoleUsage] = {}
    total = zero("total")
    for c in calls:
        role = c["role"] or "unknown"
        for usage in (roles.setdefault(role, zero(role)), total):
            usage.calls += 1
            usage.input_tokens += int(c["input_tokens"] or 0)
            usage.output_tokens += int(c["output_tokens"] or 0)
            usage.cost_usd += float(c["cost_usd"] or 0.0)
            usage.latency_s += float(c["latency_s"] or 0.0)
            usage.retries += int(c["retries"] or 0)
            usage.replayed += int(bool(c["replayed"]))
            usage.errors += int(bool(c["error"]))
    return sorted(roles.values(), key=lambda u: u.role), total


def _settings(run: dict[str, Any], config: dict[str, Any]) -> dict[str, str]:
    flat: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k in sorted(value):
                walk(f"{prefix}.{k}" if prefix else str(k), value[k])
        else:
            flat[prefix] = "" if value is None else str(value)

    walk("", config)
    for key in ("task", "model", "device", "language"):
        flat.setdefault(key, str(run[key] or ""))
    return flat


# ---- the tree and its diffs -----------------------------------------------------------------------------------


def _nodes(wm: WorldModel, points: list[CandidatePoint], store: Store) -> list[NodeView]:
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
        candidate_id, code_label = tried[-1].candidate_id, f"its last attempt (round {tried[-1].round_index}, {tried[-1].verdict})"
    assert candidate_id is not None
    parent = wm.nodes.get(node.parent_id) if node.parent_id else None
    if node.id == ROOT_ID:
        base_id, base_label = None, "nothing: this is the seed kernel the search started from"
    elif parent is not None and parent.solution is not None:
        base_id = parent.solution.candidate_id
        base_label = "the seed kernel (the root's solution)" if parent.id == ROOT_ID else f"the solution of its parent {parent.id}"
    else:
        base_id, base_label = None, "nothing: written from the task spec (the parent has no code)"
    try:
        new = code_of(candidate_id)
        old = code_of(base_id) if base_id else ""
    except KeyError:
        return None
    return code_diff(old, new, candidate_id=candidate_id, code_label=code_label, base_label=base_label,
                     base_candidate_id=base_id)  # fmt: skip


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


# ---- the per-shape table ----------------------------------------------------------------------------------------


def _shape_table(
    store: Store,
    run: dict[str, Any],
    best_eval: Evaluation | None,
    points: list[CandidatePoint],
    evaluations: _EvaluationCache,
) -> ShapeTable:
    seed_point = next((p for p in points if p.is_seed), None)
    seed_eval = evaluations.get(seed_point.evaluation_id) if seed_point else None
    if seed_point is None:
        seed = ComparedSource(label="seed", available=False, note="no seed: the run started from the task spec (no --seed-from)")
    elif seed_eval is None or not seed_eval.timings:
        seed = ComparedSource(label="seed", available=False,
                              note=f"the seed was evaluated but not timed ({seed_eval.summary() if seed_eval else 'no evaluation'})")  # fmt: skip
    else:
        seed = ComparedSource(label="seed", available=True, note=f"the seed kernel: {seed_eval.summary()}",
                              latency_ms=seed_eval.latency_ms)  # fmt: skip
    eval_key = store.get_evaluation_key(run["best_evaluation_id"]) if run["best_evaluation_id"] else None
    ref_timings, reference = reference_measurement(store, run["task"], eval_key, best_eval)

    if best_eval is None:
        note = "no kernel has passed yet"
    elif not best_eval.timings:
        note = f"correctness only, not timed: {best_eval.summary()}; no per-shape latencies exist"
    else:
        note = f"median latency per benchmark config ({best_eval.timings[0].method} timing on {best_eval.device})"
    rows: dict[str, ShapeRow] = {}
    for source, timings in (("best", best_eval.timings if best_eval else []),
                            ("seed", seed_eval.timings if seed_eval and seed.available else []),
                            ("reference", ref_timings)):  # fmt: skip
        for t in timings:
            row = rows.setdefault(t.config, ShapeRow(config=t.config))
            setattr(row, source, t)
    for point in best_eval.roofline if best_eval else []:
        if point.config in rows:
            rows[point.config].roofline = point
    return ShapeTable(
        best_summary=best_eval.summary() if best_eval else None,
        timed=bool(best_eval and best_eval.timings),
        note=note,
        rows=list(rows.values()),
        seed=seed,
        reference=reference,
    )


def reference_measurement(
    store: Store, task_name: str, eval_key: str | None, best_eval: Evaluation | None
) -> tuple[list[Timing], ComparedSource]:
    """The task's reference timed like the best kernel, if the workspace holds such a measurement; never measured here.

    Looked for, in order: a stored evaluation (same evaluation key) of the reference packaged as a candidate (TriMul's
    submission form, a FlashInfer definition's reference); a FlashInfer ``?baseline=FILE`` of per-config reference
    medians; KernelBench's cached eager baseline in ``WORKSPACE/baselines``."""

    def missing(note: str) -> tuple[list[Timing], ComparedSource]:
        return [], ComparedSource(label="reference", available=False, note=note)

    if best_eval is None or not best_eval.timings or eval_key is None:
        return missing("nothing to compare with: the best kernel has no per-shape latencies")
    try:
        from ksearch.tasks.registry import resolve_task

        task = resolve_task(task_name)
    except Exception as exc:  # a task that cannot be loaded here (a missing KernelBench checkout, a moved file)
        return missing(f"the task could not be loaded here to find its reference: {exc}")

    candidate = _reference_candidate(task)
    if candidate is not None:
        found = store.find_evaluation(candidate.id, eval_key)
        if found is not None and found[1].passed and found[1].timings:
            return list(found[1].timings), ComparedSource(
                label="reference", available=True, latency_ms=found[1].latency_ms,
                note=f"the task's reference, evaluated in this workspace like a candidate: {found[1].summary()}",
            )  # fmt: skip
    baseline_ms: dict[str, float] = getattr(task, "baseline_ms", None) or {}
    if baseline_ms:
        method = best_eval.timings[0].method
        timings = [Timing(config=c, median_ms=ms, mean_ms=ms, stdev_ms=0.0, samples=0, method=method)
                   for c, ms in baseline_ms.items()]  # fmt: skip
        return timings, ComparedSource(label="reference", available=True,
                                       note="the definition's reference, from the baseline file the task names (medians only)")  # fmt: skip
    kb = _kernelbench_baseline(task, store.path.parent, eval_key)
    if kb is not None:
        return kb
    return missing(
        "the reference was never timed in this workspace on this device and harness, so the table has no reference "
        "column (the report never measures anything)"
    )


def _reference_candidate(task: Any) -> Candidate | None:
    """The task's reference as the evaluator would run it, where the task can package it as a candidate."""
    if hasattr(task, "reference_submission_source"):
        return Candidate(task=task.name, language="triton", code=task.reference_submission_source(),
                         entry_point=task.entry_point)  # fmt: skip
    if getattr(task, "definition", None) is not None:
        from ksearch.tasks.flashinfer.baseline import reference_candidate

        return reference_candidate(task)
    return None


def _kernelbench_baseline(task: Any, workspace: Path, eval_key: str) -> tuple[list[Timing], ComparedSource] | None:
    from ksearch.tasks.kernelbench import KernelBenchTask

    if not isinstance(task, KernelBenchTask):
        return None
    from ksearch.flows.baselines import Baseline, baseline_path, cache_key

    for mode in ("eager", "compile"):
        path = baseline_path(workspace, cache_key(task, mode, eval_key))
        if path.is_file():
            try:
                base = Baseline.model_validate_json(path.read_text(encoding="utf-8"))
            except ValueError:
                continue
            if base.timings:
                return list(base.timings), ComparedSource(
                    label="reference", available=True, latency_ms=base.latency_ms,
                    note=f"the problem's PyTorch Model ({mode}), cached by an earlier run or sweep in {path.parent}",
                )  # fmt: skip
    return None


def _ratio(slow: Timing | None, fast: Timing | None) -> float | None:
    if slow is None or fast is None or fast.median_ms <= 0:
        return None
    return slow.median_ms / fast.median_ms
