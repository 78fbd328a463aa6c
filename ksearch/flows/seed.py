"""A run's seed solution (``--seed-from``): stored as a candidate, evaluated like any other, and put on the root of
a fresh run's state as the best so far (K-Search's continue-from-solution: the first cycles edit it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ksearch.agent.config import RunConfig
from ksearch.agent.context import SearchContext
from ksearch.agent.counters_collect import CounterTarget, collect
from ksearch.agent.state import BestRef, SearchState
from ksearch.agent.task_guard import ensure_task_file_unchanged
from ksearch.agent.world_model import ROOT_ID, SolutionRef, WorldModel, attach_seed
from ksearch.contracts.candidate import Candidate
from ksearch.errors import UserError
from ksearch.flows.driving import EventSink
from ksearch.flows.run_config import SEED_CYCLE_ID


def register_seed(ctx: SearchContext) -> RunConfig:
    """Store the ``--seed-from`` file as a candidate; the config then names it (replays reuse it, not the file)."""
    config = ctx.config
    if config.seed_candidate_id:
        ctx.store.get_candidate(config.seed_candidate_id)  # KeyError if the workspace lost it
        return config
    path = Path(config.seed_from or "")
    try:
        code = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the seed solution {path}: {exc}") from exc
    candidate = Candidate(task=config.task, language=config.language, code=code, entry_point=ctx.task.entry_point)
    return config.model_copy(
        update={"seed_from": str(path.resolve()), "seed_candidate_id": ctx.store.ensure_candidate(candidate)}
    )


def seed_evaluation(ctx: SearchContext, on_event: EventSink | None = None) -> tuple[str, Any]:
    """Evaluate the seed like any candidate (cached per evaluation key); UserError when it does not pass."""
    config = ctx.config
    candidate_id = config.seed_candidate_id
    assert candidate_id is not None
    found = ctx.store.find_evaluation(candidate_id, ctx.eval_key)
    if found is None:
        evaluation = ctx.evaluate_candidate(
            ctx.store.get_candidate(candidate_id)
        )  # on a leased GPU, like every candidate
        ensure_task_file_unchanged(config)
        found = ctx.store.record_evaluation(candidate_id, ctx.eval_key, evaluation), evaluation
    evaluation_id, evaluation = found
    if not evaluation.passed:
        raise UserError(
            f"the seed solution {config.seed_from or candidate_id} does not pass: {evaluation.summary()}",
            hint="fix it first; check it with `ksearch eval " + config.task + " FILE`",
        )
    if on_event is not None:
        on_event("new_best", {"node_id": ROOT_ID, "summary": f"seed: {evaluation.summary()}"})
    return evaluation_id, evaluation


def initial_state(ctx: SearchContext) -> SearchState:
    """A fresh run's state: empty, or with the seed solution on the root as the best so far (K-Search's
    continue-from-solution: the first cycles edit it). Its evaluation is recorded as the run's attempts row 0."""
    config = ctx.config
    if not config.seed_candidate_id:
        return SearchState(approval_required=config.require_approval)
    evaluation_id, evaluation = seed_evaluation(ctx)
    ctx.store.record_attempt(
        {
            "run_id": config.run_id,
            "cycle_id": SEED_CYCLE_ID,
            "attempt": 0,
            "round_index": 0,
            "node_id": ROOT_ID,
            "prompt_kind": "seed",
            "candidate_id": config.seed_candidate_id,
            "evaluation_id": evaluation_id,
            "verdict": evaluation.verdict.value,
            "score": evaluation.score,
            "error": None,
        }
    )
    # The seed's hardware counters, so the first plan knows where its time goes (stored: a resume does not pay again).
    collect(ctx, CounterTarget(evaluation_id, config.seed_candidate_id, "the seed"))
    ref = SolutionRef(
        candidate_id=config.seed_candidate_id,
        evaluation_id=evaluation_id,
        verdict=evaluation.verdict.value,
        score=evaluation.score,
        latency_ms=evaluation.latency_ms,
    )
    best = BestRef(
        candidate_id=config.seed_candidate_id,
        evaluation_id=evaluation_id,
        node_id=ROOT_ID,
        score=evaluation.score,
        latency_ms=evaluation.latency_ms,
    )
    ctx.store.update_run(
        config.run_id, best_candidate_id=best.candidate_id, best_evaluation_id=evaluation_id, best_score=best.score
    )
    return SearchState(world_model=attach_seed(WorldModel(), ref), best=best, approval_required=config.require_approval)
