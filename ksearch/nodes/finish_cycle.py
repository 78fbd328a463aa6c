"""finish_cycle: turn the cycle's bookkeeping into the one result the outer graph folds in."""

from __future__ import annotations

from ksearch.agent.state import CycleResult, CycleState


def finish_cycle(state: CycleState) -> dict:
    p = state.progress
    result = CycleResult(
        cycle_id=state.cycle_id,
        node_id=state.node_id,
        rounds=state.attempt - (1 if state.halted else 0),
        passed=p.passed_any,
        stop_reason=state.stop_reason or "ended",
        base_score=state.base_score,
        base_candidate_id=state.base_candidate_id,
        best_candidate_id=p.best_candidate_id if p.passed_any else None,
        best_evaluation_id=p.best_evaluation_id if p.passed_any else None,
        best_score=p.best_score,
        last_candidate_id=state.last_candidate_id,
        last_evaluation_id=state.last_evaluation_id,
        last_error=state.last_error,
    )
    return {"cycle_results": [result]}
