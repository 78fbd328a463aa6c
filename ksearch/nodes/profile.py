"""profile: correctness then timing of this round's candidate, in a sandboxed worker; records the round.

Idempotent by construction: an evaluation is looked up by (candidate, evaluation key) before it is run, so a node
re-run after a crash, or an identical candidate written twice, never evaluates the same code again.
"""

from __future__ import annotations

import structlog
from langgraph.runtime import Runtime

from ksearch.agent.context import SearchContext
from ksearch.agent.cycle_logic import cycle_should_stop, record_round
from ksearch.agent.state import CycleState
from ksearch.agent.task_guard import ensure_task_file_unchanged
from ksearch.contracts.evaluation import Evaluation, Verdict
from ksearch.tools import integrity

log = structlog.get_logger(__name__)


def profile(state: CycleState, runtime: Runtime[SearchContext]) -> dict:
    ctx = runtime.context
    cfg = ctx.config
    if state.halted:  # the model was not asked: a budget spent, or a replay's recording run out
        return {"stop_reason": state.write_error or "LLM budget exhausted"}
    evaluation_id: str | None = None
    evaluation: Evaluation | None = None
    error = state.write_error
    if state.candidate_id is not None:
        found = ctx.store.find_evaluation(state.candidate_id, ctx.eval_key)
        if found is not None:
            evaluation_id, evaluation = found
            log.info("profile.cached", run_id=ctx.run_id, cycle_id=state.cycle_id, candidate_id=state.candidate_id)
        else:
            runtime.stream_writer({"event": "evaluate", "cycle_id": state.cycle_id, "attempt": state.attempt})
            evaluation = run_evaluation(state, ctx)
            ensure_task_file_unchanged(cfg)  # the verdict was decided by the file the run's key names
            evaluation_id = ctx.store.record_evaluation(state.candidate_id, ctx.eval_key, evaluation)
        error = None if evaluation.passed else evaluation.summary()

    passed = evaluation is not None and evaluation.passed
    progress = record_round(
        state.progress,
        passed=passed,
        score=evaluation.score if evaluation is not None else None,
        candidate_id=state.candidate_id or "",
        evaluation_id=evaluation_id or "",
        base_score=state.base_score,
    )
    round_index = state.round_offset + state.attempt
    round_number = ctx.store.record_attempt(
        {
            "run_id": ctx.run_id,
            "cycle_id": state.cycle_id,
            "attempt": state.attempt,
            "round_index": round_index,
            "node_id": state.node_id,
            "prompt_kind": state.prompt_kind,
            "candidate_id": state.candidate_id,
            "evaluation_id": evaluation_id,
            "verdict": evaluation.verdict.value if evaluation else "no_code",
            "score": evaluation.score if evaluation else None,
            "error": error,
        }
    )
    log.info(
        "profile.round",
        run_id=ctx.run_id,
        cycle_id=state.cycle_id,
        attempt=state.attempt,
        round_index=round_index,
        verdict=evaluation.verdict.value if evaluation else "no_code",
        score=evaluation.score if evaluation else None,
    )
    stop = cycle_should_stop(progress, window=cfg.stagnation_window, attempt_budget=state.attempt_budget)
    runtime.stream_writer(
        {
            "event": "round",
            "cycle_id": state.cycle_id,
            "node_id": state.node_id,
            "attempt": state.attempt,
            "round_index": round_index,
            # the store's count: what the screen shows, whatever resumed or ran in parallel
            "round_number": round_number,
            "verdict": evaluation.verdict.value if evaluation else "no_code",
            "summary": evaluation.summary() if evaluation else (error or ""),
            "cycle_best_score": progress.best_score,
            "stop_reason": stop,
        }
    )
    return {
        "progress": progress,
        "evaluation_id": evaluation_id,
        "last_candidate_id": state.candidate_id or state.last_candidate_id,
        "last_evaluation_id": evaluation_id,
        "last_error": error,
        "stop_reason": stop,
    }


def run_evaluation(state: CycleState, ctx: SearchContext) -> Evaluation:
    """Static-check failures become compile errors without starting a worker; everything else runs sandboxed."""
    assert state.candidate_id is not None
    candidate = ctx.store.get_candidate(state.candidate_id)
    if state.compile_error:
        rejection = integrity.check_source(candidate.code, task_name=ctx.task.name)
        if rejection is not None:  # the compile step's message came from a static integrity rule
            return Evaluation(
                verdict=Verdict.REJECTED, device=ctx.config.device, rejection=rejection, log=state.compile_error
            )
        return Evaluation(verdict=Verdict.COMPILE_ERROR, device=ctx.config.device, log=state.compile_error)
    log.info("profile.evaluate", run_id=ctx.run_id, cycle_id=state.cycle_id, candidate_id=state.candidate_id)
    with ctx.device_lease() as device:  # one evaluation per GPU at a time: timings never share a device
        if ctx.gpu_pool is not None:
            log.info("profile.leased", run_id=ctx.run_id, cycle_id=state.cycle_id, device=device)
        return ctx.evaluate(ctx.eval_request(candidate, device))
