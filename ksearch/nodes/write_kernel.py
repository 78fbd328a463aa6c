"""write_kernel (LLM): one round's code: from the spec or the parent's code first, then debug or improve prompts."""

from __future__ import annotations

import structlog
from langgraph.runtime import Runtime

from ksearch.agent.code_view import change_view, fenced
from ksearch.agent.context import SearchContext
from ksearch.agent.cycle_logic import PromptKind, choose_prompt
from ksearch.agent.evidence_text import LEGEND, Score, aggregate_change, evidence_text, perf_text
from ksearch.agent.prompting import action_view, spec_with_reference
from ksearch.agent.sibling_view import sibling_results
from ksearch.agent.skill_use import coder_skill
from ksearch.agent.state import CycleState
from ksearch.agent.world_model import Node
from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation
from ksearch.errors import BudgetExceededError, ModelReplyError
from ksearch.llm.interactive import ReplyFormat
from ksearch.llm.parsing import code_repair_prompt, extract_code
from ksearch.prompts import clip, render, template_text

log = structlog.get_logger(__name__)

CODE_REPLY = ReplyFormat(
    kind="code",
    description="the complete Python module (imports, kernels, the task's entry point) in ONE ```python fenced block; "
    "a bare module with no fences is taken whole",
)

SITUATION_TEMPLATE = {
    PromptKind.ACTION_ON_BASE: "situation_action_on_base",
    PromptKind.ACTION_FROM_SPEC: "situation_action_from_spec",
    PromptKind.DEBUG: "situation_debug",
    PromptKind.IMPROVE: "situation_improve",
}


def write_kernel(state: CycleState, runtime: Runtime[SearchContext]) -> dict:
    ctx = runtime.context
    cfg = ctx.config
    attempt = state.attempt + 1
    kind = choose_prompt(
        attempt,
        has_base_code=state.base_candidate_id is not None,
        last_passed=state.progress.last_passed,
        passed_in_cycle=state.progress.passed_any,
    )
    prompt = coder_prompt(state, ctx, attempt, kind)
    call_key = f"write:{state.cycle_id}:{attempt}"
    runtime.stream_writer({"event": "write", "cycle_id": state.cycle_id, "attempt": attempt, "prompt_kind": kind.value})
    log.info("write_kernel.start", run_id=ctx.run_id, cycle_id=state.cycle_id, attempt=attempt, prompt_kind=kind.value)
    update: dict = {
        "attempt": attempt,
        "prompt_kind": kind.value,
        "candidate_id": None,
        "write_error": None,
        "compile_error": None,
        "evaluation_id": None,
    }
    try:
        code, error = _ask_for_code(ctx, call_key, prompt)
    except BudgetExceededError as exc:
        log.warning("write_kernel.budget_exhausted", run_id=ctx.run_id, error=str(exc))
        return {**update, "halted": True, "write_error": exc.stop_reason}
    if code is None:
        return {**update, "write_error": error}
    candidate = Candidate(task=cfg.task, language=cfg.language, code=code, entry_point=ctx.task.entry_point)
    update["candidate_id"] = ctx.store.ensure_candidate(candidate)
    return update


def _ask_for_code(ctx: SearchContext, call_key: str, prompt: str) -> tuple[str | None, str | None]:
    """The module in the coder's reply, with one repair round when the reply holds no usable code."""
    language = ctx.config.language
    reply = ctx.llm.complete("coder", call_key, prompt, reply_format=CODE_REPLY).reply
    try:
        return extract_code(reply, language), None
    except ModelReplyError as first_error:
        repair = code_repair_prompt(prompt, str(first_error))
        reply = ctx.llm.complete("coder", f"{call_key}#repair1", repair, reply_format=CODE_REPLY).reply
        try:
            return extract_code(reply, language), None
        except ModelReplyError as exc:
            return None, f"the reply contained no usable code: {exc}"


def coder_prompt(state: CycleState, ctx: SearchContext, attempt: int, kind: PromptKind) -> str:
    """The coder's prompt for ``attempt`` of the cycle."""
    cfg = ctx.config
    return render(
        "write_kernel",
        language=cfg.language,
        task_spec=spec_with_reference(ctx.task, cfg.language),
        device_description=ctx.device_description,
        cycle_id=state.cycle_id,
        attempt=attempt,
        attempt_budget=state.attempt_budget,
        action_view=action_view(Node(id=state.node_id, action=state.action)) + coder_skill(ctx, state.action),
        situation=template_text(SITUATION_TEMPLATE[kind]).strip(),
        base_code=starting_code(state, ctx, attempt),
        best_code=best_code(state, ctx, attempt),
        feedback=feedback(state, ctx) if attempt > 1 else first_feedback(state, ctx),
        measurement_legend=LEGEND,
        others=sibling_results(state, ctx),
        tree_view=state.tree_view or "(not available)",
        stream_rule=ctx.task.side_stream_rule,
    )


def _shown_id(state: CycleState, attempt: int) -> str | None:
    """The code under "Code to start from": the last attempt's, else the base the cycle started from."""
    return state.last_candidate_id if attempt > 1 and state.last_candidate_id else state.base_candidate_id


def starting_code(state: CycleState, ctx: SearchContext, attempt: int) -> str:
    source_id = _shown_id(state, attempt)
    if source_id is None:
        return "(none: start from the spec)"
    return fenced(ctx.store.get_candidate(source_id).code)


def base_evaluation(state: CycleState, ctx: SearchContext) -> Evaluation | None:
    """The evaluation of the code the cycle started from (the parent's solution) on this run's evaluator."""
    if state.base_candidate_id is None:
        return None
    found = ctx.store.find_evaluation(state.base_candidate_id, ctx.eval_key)
    return found[1] if found is not None else None


def first_feedback(state: CycleState, ctx: SearchContext) -> str:
    """Attempt 1: the base code's own measurements (per-shape timings, roofline position, profile), so the coder
    knows where the time goes before it changes anything."""
    base = base_evaluation(state, ctx)
    if base is None:
        return "(first attempt of this cycle; no measurements of a base code)"
    lines = [f"First attempt of this cycle. The base code above measured: {base.summary()}"]
    evidence = evidence_text(base, score=_score(ctx))
    if evidence:
        lines.append(evidence)
    return "\n".join(lines)


def _score(ctx: SearchContext) -> Score | None:
    task = getattr(ctx, "task", None)
    return task.score if task is not None else None


def _regressed(state: CycleState) -> bool:
    """The last attempt passed but scored below the cycle's best."""
    p = state.progress
    return bool(p.last_passed) and p.best_score is not None and state.last_evaluation_id != p.best_evaluation_id


def best_code(state: CycleState, ctx: SearchContext, attempt: int) -> str:
    """After a failed or slower attempt: the best code of the cycle so far (or the base it started from, when nothing
    passed yet) as a diff against the last attempt shown above, so the coder can see what worked ('' otherwise)."""
    if attempt <= 1:
        return ""
    failed = state.progress.last_passed is False or state.last_evaluation_id is None
    if not failed and not _regressed(state):
        return ""
    best_id = state.progress.best_candidate_id if state.progress.passed_any else state.base_candidate_id
    shown = _shown_id(state, attempt)
    if best_id is None or best_id == shown:
        return ""
    what = "the best code of this cycle so far" if state.progress.passed_any else "the base code the cycle started from"
    why = "failed" if failed else "was slower"
    shown_code = ctx.store.get_candidate(shown).code if shown else None
    view = change_view(shown_code, ctx.store.get_candidate(best_id).code, "your last attempt", what)
    return f"\n# For comparison (your last attempt above {why}; keep what made this one work)\n{view}"


def feedback(state: CycleState, ctx: SearchContext) -> str:
    lines = []
    if state.last_evaluation_id:
        ev = ctx.store.get_evaluation(state.last_evaluation_id)
        reference, label = comparison(state, ctx)
        change = aggregate_change(ev, reference) if reference is not None else None  # None unless both were timed
        lines.append(
            f"Verdict of your last attempt: {ev.summary()}" + (f", {change.describe(label)}" if change else "")
        )
        evidence = evidence_text(ev, reference, label, score=_score(ctx))
        if evidence:
            lines.append(evidence)
        if ev.mismatch:
            m = ev.mismatch
            lines.append(
                f"Mismatch on {m.config}: max abs error {m.max_abs_error}, max rel error {m.max_rel_error}, "
                f"worst index {m.worst_index}"
            )
        if ev.rejection:
            lines.append(f"Rejected by rule {ev.rejection.rule}: {ev.rejection.evidence}")
        if ev.log and not ev.passed:
            lines.append("Log:\n" + clip(ev.log, 4000))
    elif state.last_error:
        lines.append(clip(state.last_error, 4000))
    best_id = state.progress.best_evaluation_id
    if best_id and best_id != state.last_evaluation_id:
        best = ctx.store.get_evaluation(best_id)
        lines.append(f"Best of this cycle so far: {perf_text(best.latency_ms, best.score)}")
    base = base_evaluation(state, ctx)
    if base is not None and base.passed:
        lines.append(
            f"The base this cycle started from (the parent's solution): {perf_text(base.latency_ms, base.score)}"
        )
    return "\n".join(lines) or "(none)"


def comparison(state: CycleState, ctx: SearchContext) -> tuple[Evaluation | None, str]:
    """What the last attempt's shapes are compared with: the cycle's best when that is another attempt, else the
    base code."""
    best = state.progress.best_evaluation_id
    if best and best != state.last_evaluation_id:
        return ctx.store.get_evaluation(best), "cycle best"
    return base_evaluation(state, ctx), "base"
