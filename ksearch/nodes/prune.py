"""prune (no LLM): fold cycle results into the tree, promote the best, close failed actions, check budgets."""

from __future__ import annotations

import structlog
from langgraph.runtime import Runtime

from ksearch.agent.context import SearchContext
from ksearch.agent.promotion import Decision, comparison_record, decide
from ksearch.agent.state import BestRef, SearchState
from ksearch.agent.world_model import SolutionRef, attach_solution, mark_failed
from ksearch.store import ensure_comparison, find_comparison

log = structlog.get_logger(__name__)


def prune(state: SearchState, runtime: Runtime[SearchContext]) -> dict:
    ctx = runtime.context
    cfg = ctx.config
    wm = state.world_model
    best = state.best
    rounds = state.rounds_used
    for result in sorted(state.cycle_results, key=lambda r: r.cycle_id):
        rounds += result.rounds
        if not (result.passed and result.best_candidate_id and result.best_evaluation_id):
            wm = mark_failed(wm, result.node_id)
            log.info("prune.failed_action", run_id=ctx.run_id, node_id=result.node_id, cycle_id=result.cycle_id)
            continue
        evaluation = ctx.store.get_evaluation(result.best_evaluation_id)
        ref = SolutionRef(
            candidate_id=result.best_candidate_id,
            evaluation_id=result.best_evaluation_id,
            verdict=evaluation.verdict.value,
            score=evaluation.score,
            latency_ms=evaluation.latency_ms,
            round_index=rounds,
            regression_vs_parent=(
                result.base_score is not None and evaluation.score is not None and evaluation.score < result.base_score
            ),
        )
        wm = attach_solution(wm, result.node_id, ref)
        decision = promotion_decision(ctx, best, result.best_candidate_id, evaluation.score)
        log.info(
            "prune.promotion",
            run_id=ctx.run_id,
            node_id=result.node_id,
            candidate_id=result.best_candidate_id,
            incumbent_id=best.candidate_id if best else None,
            promote=decision.promote,
            reason=decision.reason,
            speedup=decision.speedup,
            ci_low=decision.ci_low,
            ci_high=decision.ci_high,
        )
        runtime.stream_writer(
            {"event": "promotion", "node_id": result.node_id, **decision.model_dump(exclude={"needs_comparison"})}
        )
        if decision.promote:
            best = BestRef(
                candidate_id=result.best_candidate_id,
                evaluation_id=result.best_evaluation_id,
                node_id=result.node_id,
                score=evaluation.score,
                latency_ms=evaluation.latency_ms,
            )
            log.info("prune.new_best", run_id=ctx.run_id, node_id=result.node_id, score=evaluation.score)
            runtime.stream_writer({"event": "new_best", "node_id": result.node_id, "summary": evaluation.summary()})

    done = budget_exhausted(ctx, rounds)
    runtime.stream_writer({"event": "pruned", "rounds_used": rounds, "done_reason": done})
    ctx.store.record_snapshot(ctx.run_id, state.step, "prune", wm.model_dump_json())
    ctx.store.update_run(
        ctx.run_id,
        rounds_used=rounds,
        best_candidate_id=best.candidate_id if best else None,
        best_evaluation_id=best.evaluation_id if best else None,
        best_score=best.score if best else None,
    )
    return {
        "world_model": wm,
        "best": best,
        "rounds_used": rounds,
        "cycle_results": None,
        "evidence": state.cycle_results,
        "step": state.step + 1,
        "done_reason": done,
    }


def promotion_decision(ctx: SearchContext, best: BestRef | None, challenger_id: str, score: float | None) -> Decision:
    """The promotion rule of ``ksearch.agent.promotion`` with its paired comparison measured (on a leased GPU) and
    stored by (incumbent, challenger, evaluation key), so a prune re-run after a crash decides the same way."""
    kwargs = {
        "has_incumbent": best is not None,
        "incumbent_score": best.score if best else None,
        "challenger_score": score,
        "can_compare": ctx.compare is not None,
    }
    decision = decide(**kwargs)
    if not decision.needs_comparison or best is None:
        return decision
    record = find_comparison(ctx.store, best.candidate_id, challenger_id, ctx.eval_key)
    if record is None:
        try:
            record = comparison_record(_measure(ctx, best.candidate_id, challenger_id))
        except Exception as exc:  # noqa: BLE001 - a failed re-measurement keeps the incumbent, never crashes the run
            log.warning("prune.compare_failed", run_id=ctx.run_id, challenger_id=challenger_id, error=str(exc)[:500])
            return Decision(promote=False, reason=f"paired comparison failed: {str(exc)[:200]}")
        ensure_comparison(ctx.store, best.candidate_id, challenger_id, ctx.eval_key, record)
    return decide(**kwargs, comparison=record)


def _measure(ctx: SearchContext, incumbent_id: str, challenger_id: str):  # noqa: ANN202 - the evaluator's Comparison
    assert ctx.compare is not None
    incumbent, challenger = ctx.store.get_candidate(incumbent_id), ctx.store.get_candidate(challenger_id)
    with ctx.device_lease() as device:
        return ctx.compare(
            ctx.eval_request(incumbent, device), ctx.eval_request(challenger, device), rounds=ctx.config.promotion_rounds
        )


def budget_exhausted(ctx: SearchContext, rounds: int) -> str | None:
    cfg = ctx.config
    if rounds >= cfg.max_rounds:
        return f"round budget spent ({rounds}/{cfg.max_rounds})"
    reason = ctx.llm.budget_exceeded()  # the same limits the client checks before every call
    return f"LLM budget spent: {reason}" if reason else None


def route_after_prune(state: SearchState) -> str:
    return "__end__" if state.done_reason else "plan"
