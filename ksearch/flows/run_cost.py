"""What a run cost: LLM tokens (and dollars when the run was given prices), GPU time spent evaluating, and wall time
per round. Read from the store for ``ksearch show`` and the report; nothing is measured here."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from ksearch.store import Store


class RunCost(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    """None when the run was given no prices (``--price-input`` / ``--price-output``)."""
    gpu_minutes: float
    """Wall time of the run's evaluations on a GPU (each distinct evaluation once; promotion re-measurements are not
    stored as evaluations and are not counted)."""
    gpu_evaluations: int
    wall_minutes: float
    """From the run's creation to its last change (pauses included)."""
    rounds: int

    @property
    def wall_minutes_per_round(self) -> float | None:
        return self.wall_minutes / self.rounds if self.rounds else None

    def describe(self) -> str:
        dollars = f"${self.cost_usd:.4f}" if self.cost_usd is not None else "no prices given"
        per_round = self.wall_minutes_per_round
        rounds = f", {per_round:.2f} wall minutes per round" if per_round is not None else ""
        return (
            f"{self.input_tokens} input + {self.output_tokens} output tokens ({dollars}); "
            f"{self.gpu_minutes:.2f} GPU-minutes in {self.gpu_evaluations} evaluations; "
            f"{self.wall_minutes:.1f} wall minutes over {self.rounds} round{'' if self.rounds == 1 else 's'}{rounds}"
        )


def run_cost(store: Store, run: dict[str, Any]) -> RunCost:
    """The cost of ``run`` (a row of ``store.get_run``)."""
    usage = store.usage(run["id"])["total"]
    budget = (run.get("config") or {}).get("budget") or {}
    priced = budget.get("price_input_per_mtok") is not None and budget.get("price_output_per_mtok") is not None
    seconds = 0.0
    evaluations = 0
    seen: set[str] = set()
    for attempt in store.list_attempts(run["id"]):
        evaluation_id = attempt.get("evaluation_id")
        if not evaluation_id or evaluation_id in seen:
            continue
        seen.add(evaluation_id)
        try:
            evaluation = store.get_evaluation(evaluation_id)
        except KeyError:
            continue
        if evaluation.device != "cpu":
            seconds += evaluation.duration_s
            evaluations += 1
    return RunCost(
        input_tokens=int(usage.get("input_tokens", 0)),
        output_tokens=int(usage.get("output_tokens", 0)),
        cost_usd=float(usage.get("cost_usd", 0.0)) if priced else None,
        gpu_minutes=round(seconds / 60.0, 3),
        gpu_evaluations=evaluations,
        wall_minutes=round(max(0.0, run["updated_at"] - run["created_at"]) / 60.0, 3),
        rounds=int(run.get("rounds_used") or 0),
    )
