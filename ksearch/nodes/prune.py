"""prune (no LLM): fold cycle results into the tree, promote the best, close failed actions, check budgets."""

from __future__ import annotations

from functools import partial

import structlog
from langgraph.errors import GraphBubbleUp
from langgraph.runtime import Runtime

from ksearch.agent.context import SearchContext
from ksearch.agent.evidence_text import parent_change
from ksearch.agent.promotion import Decision, confirmation_decision, decide, paired_comparison, promotion_line
from ksearch.agent.state import BestRef, CycleResult, SearchState
from ksearch.agent.steering import Act
from ksearch.agent.world_model import SolutionRef, WorldModel, attach_solution, mark_failed
from ksearch.contracts.evaluation import Evaluation
from ksearch.llm.interactive import Prompt, ReplyFormat, approval_key, ask
from ksearch.store.steering import APPLIED, PENDING, add_act, find_decision, settle_act
from ksearch.tools.timing import CONFIRM_METHOD

log = structlog.get_logger(__name__)


def prune(state: SearchState, runtime: Runtime[SearchContext]) -> dict:
    ctx = runtime.context
    wm = state.world_model
    best = state.best
    rounds = state.rounds_used
    evidence = []  # the cycle results as the next plan reads them: each passed one with its promotion decision
    for result in sorted(state.cycle_results, key=lambda r: r.cycle_id):
        rounds += result.rounds
        if not (result.passed and result.best_candidate_id and result.best_evaluation_id):
            evidence.append(result)
            wm = mark_failed(wm, result.node_id)
            log.info("prune.failed_action", run_id=ctx.run_id, node_id=result.node_id, cycle_id=result.cycle_id)
            continue
        evaluation = ctx.store.get_evaluation(result.best_evaluation_id)
        change = parent_change(evaluation, _parent_evaluation(ctx, result), result.base_score)
        ref = SolutionRef(
            candidate_id=result.best_candidate_id,
            evaluation_id=result.best_evaluation_id,
            verdict=evaluation.verdict.value,
            score=evaluation.score,
            latency_ms=evaluation.latency_ms,
            round_index=rounds,
            regression_vs_parent=change is not None and not change.within_noise and change.speedup < 1.0,
            vs_parent=round(change.speedup, 4) if change is not None else None,
            vs_parent_within_noise=change is not None and change.within_noise,
        )
        wm = attach_solution(wm, result.node_id, ref)
        decision = promotion_decision(ctx, best, result.best_candidate_id, evaluation.score)
        if decision.promote and state.approval_required:
            decision = approved_decision(
                ctx, state, wm, best, result.node_id, result.best_candidate_id, evaluation, decision
            )
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
        evidence.append(result.model_copy(update={"promotion": promotion_line(decision)}))
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
        "evidence": evidence,
        "step": state.step + 1,
        "done_reason": done,
    }


def _parent_evaluation(ctx: SearchContext, result: CycleResult) -> Evaluation | None:
    """The evaluation of the code the cycle started from, on this run's evaluator (None without one)."""
    if not result.base_candidate_id:
        return None
    found = ctx.store.find_evaluation(result.base_candidate_id, ctx.eval_key)
    return found[1] if found is not None else None


def approved_decision(
    ctx: SearchContext,
    state: SearchState,
    wm: WorldModel,
    best: BestRef | None,
    node_id: str,
    candidate_id: str,
    evaluation: Evaluation,
    decision: Decision,
) -> Decision:
    """A promotion that steering requires a person to approve: the run pauses (an interrupt) until someone answers
    with ``ksearch steer RUN approve|reject``. The answer is an act in the store, so a replay decides alike."""
    key = approval_key(state.step, candidate_id)
    found = find_decision(ctx.store, ctx.run_id, state.step, candidate_id)
    if found is None:
        node = wm.nodes[node_id]
        title = node.action.title if node.action else node_id
        incumbent = "none yet" if best is None else f"node {best.node_id}, candidate {best.candidate_id} ({best.score})"
        prompt = Prompt(
            kind="approval",
            key=key,
            role="person",
            prompt=(
                f"Promote a new best?\n\nNode {node_id}: {title}\nCandidate {candidate_id}: {evaluation.summary()}\n"
                f"Current best: {incumbent}\nWhy it would be promoted: {decision.reason}\n\n"
                "Answer with `ksearch steer RUN approve` or `ksearch steer RUN reject`."
            ),
            reply_format=ReplyFormat(kind="approval", description="approve or reject"),
            details={"step": state.step, "node_id": node_id, "candidate_id": candidate_id, "reason": decision.reason},
        )
        answer = ask(prompt)  # pauses the run here; resumed by `ksearch steer RUN approve|reject`
        found = find_decision(ctx.store, ctx.run_id, state.step, candidate_id)
        if found is None:  # a client resumed the graph with the answer itself: record it as an act
            act = Act.APPROVE if answer == Act.APPROVE.value else Act.REJECT
            args = {"candidate_id": candidate_id, "node_id": node_id, "step": state.step}
            add_act(
                ctx.store,
                ctx.run_id,
                act.value,
                args,
                "resume",
                status=APPLIED,
                applied_step=state.step,
                applied_round=state.rounds_used,
                result=f"{act.value}d",
            )
            found = find_decision(ctx.store, ctx.run_id, state.step, candidate_id)
            assert found is not None
    if found["status"] == PENDING:  # copied from the run this one replays
        settle_act(
            ctx.store,
            found["id"],
            status=APPLIED,
            result=f"{found['act']}d",
            applied_round=state.rounds_used,
            applied_step=state.step,
        )
    if found["act"] == Act.APPROVE.value:
        return decision.model_copy(update={"reason": f"{decision.reason}; approved by {found['author']}"})
    return Decision(promote=False, reason=f"rejected by {found['author']} ({decision.reason})")


def promotion_decision(ctx: SearchContext, best: BestRef | None, challenger_id: str, score: float | None) -> Decision:
    """The promotion rule of ``ksearch.agent.promotion`` with its leaderboard-mode confirmation and its paired
    comparison measured (on a leased GPU) and stored (the confirmation as an evaluation under the key ``confirm_key``,
    the comparison by incumbent, challenger and key: ``paired_comparison``), so a prune re-run after a crash decides the
    same way."""
    kwargs = {
        "has_incumbent": best is not None,
        "incumbent_score": best.score if best else None,
        "challenger_score": score,
        "can_compare": ctx.compare is not None,
    }
    decision = decide(**kwargs)
    confirmed_ms = None
    if (decision.promote or decision.needs_comparison) and score is not None and ctx.confirm_bests:
        confirmation = _confirmation(ctx, challenger_id)
        incumbent = _confirmation(ctx, best.candidate_id) if best is not None and best.score is not None else None
        confirmed_ms = confirmation.latency_ms
        refusal = confirmation_decision(
            passed=confirmation.verdict.value == "passed",
            summary=confirmation.summary(),
            challenger_ms=confirmed_ms,
            incumbent_ms=incumbent.latency_ms
            if incumbent is not None and incumbent.verdict.value == "passed"
            else None,
        )
        if refusal is not None:
            return refusal
        decision = decision.model_copy(update={"confirmed_latency_ms": confirmed_ms})
    if not decision.needs_comparison or best is None:
        return decision
    try:
        record = paired_comparison(ctx.store, best.candidate_id, challenger_id, ctx.eval_key, partial(_measure, ctx))
    except GraphBubbleUp:  # a pause (the comparison waits for the device): not a failed measurement
        raise
    except Exception as exc:  # noqa: BLE001 - a failed re-measurement keeps the incumbent, never crashes the run
        log.warning("prune.compare_failed", run_id=ctx.run_id, challenger_id=challenger_id, error=str(exc)[:500])
        return Decision(promote=False, reason=f"paired comparison failed: {str(exc)[:200]}")
    if record is None:  # a compare function that measured nothing keeps the incumbent, like a failed one
        return Decision(promote=False, reason="paired comparison failed: nothing was measured")
    return decide(**kwargs, comparison=record).model_copy(update={"confirmed_latency_ms": confirmed_ms})


def confirm_key(eval_key: str) -> str:
    """The store key of a candidate's leaderboard-mode confirmation on this machine."""
    return f"{eval_key}|{CONFIRM_METHOD}"


def _confirmation(ctx: SearchContext, candidate_id: str) -> Evaluation:
    """The candidate's leaderboard-mode evaluation (``confirm``), measured once on a leased GPU and stored."""
    key = confirm_key(ctx.eval_key)
    found = ctx.store.find_evaluation(candidate_id, key)
    if found is not None:
        return found[1]
    candidate = ctx.store.get_candidate(candidate_id)
    with ctx.device_lease() as device:
        request = ctx.eval_request(candidate, device).model_copy(update={"timing_method": CONFIRM_METHOD})
        evaluation = ctx.evaluate(request)
    ctx.store.record_evaluation(candidate_id, key, evaluation)
    log.info(
        "prune.confirmation",
        run_id=ctx.run_id,
        candidate_id=candidate_id,
        verdict=evaluation.verdict.value,
        latency_ms=evaluation.latency_ms,
    )
    return evaluation


def _measure(ctx: SearchContext, incumbent_id: str, challenger_id: str):  # noqa: ANN202 - the evaluator's Comparison
    assert ctx.compare is not None
    incumbent, challenger = ctx.store.get_candidate(incumbent_id), ctx.store.get_candidate(challenger_id)
    with ctx.device_lease() as device:
        return ctx.compare(
            ctx.eval_request(incumbent, device),
            ctx.eval_request(challenger, device),
            rounds=ctx.config.promotion_rounds,
        )


def budget_exhausted(ctx: SearchContext, rounds: int) -> str | None:
    cfg = ctx.config
    if rounds >= cfg.max_rounds:
        return f"round budget spent ({rounds}/{cfg.max_rounds})"
    reason = ctx.llm.budget_exceeded()  # the same limits the client checks before every call
    return f"LLM budget spent: {reason}" if reason else None
