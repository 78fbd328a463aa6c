"""Gathering the report model (``report_model``) from the workspace store: one run, or several side by side.

Gathering is pure reading: nothing is evaluated or measured here.
"""

from __future__ import annotations

from typing import Any

from ksearch.agent.world_model import WorldModel
from ksearch.contracts.evaluation import Evaluation
from ksearch.flows.report_model import (
    BestPoint,
    CandidatePoint,
    ComparisonReport,
    RoleUsage,
    RunReport,
    SettingDifference,
)
from ksearch.flows.report_shapes import shape_table
from ksearch.flows.report_tree import node_views
from ksearch.flows.run_config import SEED_CYCLE_ID
from ksearch.flows.run_cost import run_cost
from ksearch.store import Store

__all__ = ["EvaluationCache", "gather_comparison", "gather_run_report"]


def gather_run_report(store: Store, run_id: str) -> RunReport:
    """Read one run (a unique id prefix is enough) from the store into a ``RunReport``."""
    run = store.get_run(run_id)
    run_id = run["id"]
    config: dict[str, Any] = run["config"] or {}
    evaluations = EvaluationCache(store)
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
        nodes=node_views(wm, points, store),
        shapes=shape_table(store, run, best_eval, points, evaluations),
        usage=usage,
        usage_total=total,
        cost=run_cost(store, run),
        best_profile=list(best_eval.profile) if best_eval else [],
        best_resources=list(best_eval.resources) if best_eval else [],
        best_counters=best_eval.counters if best_eval else None,
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


class EvaluationCache:
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


def _point(a: dict[str, Any], run: dict[str, Any], evaluations: EvaluationCache) -> CandidatePoint:
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
                BestPoint(
                    round_index=p.round_index,
                    elapsed_s=p.elapsed_s,
                    score=best.score,
                    latency_ms=best.latency_ms,
                    candidate_id=best.candidate_id,
                    node_id=best.node_id,
                )
            )
    return curve


def _timing_note(device: str, points: list[CandidatePoint]) -> str:
    if device == "cpu":
        return "correctness only, not timed: kernels ran under the Triton interpreter on the CPU"
    if not any(p.verdict == "passed" for p in points):
        return "not timed yet: no candidate has passed"
    return "not timed: no passed candidate carries a latency"


def _environment_source(
    best_eval: Evaluation | None, points: list[CandidatePoint], evaluations: EvaluationCache
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
        return RoleUsage(
            role=role,
            calls=0,
            input_tokens=0,
            output_tokens=0,
            cost_usd=0.0,
            latency_s=0.0,
            retries=0,
            replayed=0,
            errors=0,
        )

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
