"""plan (LLM): write the first tree, or refine it from the evidence of the cycles that just ended.

The reply is an edit script; this node only parses it. ``edit_tree`` validates and applies it, and sends it back here
with the errors when it is invalid, so the planner repairs its own script.
"""

from __future__ import annotations

from functools import partial

import structlog
from langgraph.runtime import Runtime

from ksearch.agent import planner_evidence
from ksearch.agent.code_view import fenced
from ksearch.agent.compete_view import competitors_view
from ksearch.agent.context import SearchContext
from ksearch.agent.counters_collect import planner_counters_view
from ksearch.agent.counters_text import counters_text
from ksearch.agent.edit_ops import EditScript, edit_script_json_schema
from ksearch.agent.edits import render_edit_errors
from ksearch.agent.evidence_text import LEGEND, perf_text, roofline_summary
from ksearch.agent.prompting import (
    edit_schema_outline,
    edit_schema_text,
    frontier_view,
    spec_with_reference,
    tree_view,
)
from ksearch.agent.selection import SelectionPolicy
from ksearch.agent.skill_use import planner_skills, trial_line
from ksearch.agent.state import BestRef, CycleResult, SearchState
from ksearch.agent.world_model import WorldModel
from ksearch.errors import BudgetExceededError, ModelReplyError
from ksearch.prompts import clip, render
from ksearch.store import Store

log = structlog.get_logger(__name__)


def plan(state: SearchState, runtime: Runtime[SearchContext]) -> dict:
    ctx = runtime.context
    prompt = planner_prompt(state, ctx)
    if state.edit_errors:
        prompt = render(
            "plan_repair",
            original_prompt=prompt,
            previous_reply=clip(state.plan_raw_reply or "(no usable reply)", 8000),
            errors=render_edit_errors(state.edit_errors),
            full_schema=edit_schema_text(edit_script_json_schema()),
        )
    call_key = f"plan:{state.step}:{state.edit_attempt}"
    log.info("plan.start", run_id=ctx.run_id, step=state.step, attempt=state.edit_attempt)
    runtime.stream_writer({"event": "plan", "step": state.step, "attempt": state.edit_attempt})
    try:
        parsed, calls = ctx.llm.complete_json(
            "planner", call_key, prompt, model_cls=EditScript, max_repairs=ctx.config.max_plan_repairs
        )
    except ModelReplyError as exc:
        log.warning("plan.unusable_reply", run_id=ctx.run_id, error=str(exc))
        return {"plan_reply": None, "plan_raw_reply": exc.last_reply, "plan_error": f"unusable reply: {exc}"}
    except BudgetExceededError as exc:
        return {"plan_reply": None, "plan_error": str(exc), "done_reason": exc.stop_reason}
    script = parsed if isinstance(parsed, EditScript) else EditScript.model_validate(parsed)
    return {
        "plan_reply": script.model_dump(mode="json", exclude_none=True),
        "plan_raw_reply": calls[-1].reply if calls else None,
        "plan_error": None,
    }


def planner_prompt(state: SearchState, ctx: SearchContext) -> str:
    cfg = ctx.config
    schema = edit_schema_outline(edit_script_json_schema())
    spec = spec_with_reference(ctx.task, cfg.language)
    wm = state.world_model
    if not wm.is_initialised:
        return render(
            "plan_init",
            seed_view=seed_view(wm, ctx.store),
            task_spec=spec,
            language=cfg.language,
            device_description=ctx.device_description,
            max_new_nodes=cfg.max_new_nodes_init,
            competitors=competitors_section(ctx, state.best),
            edit_schema=schema,
            skills=planner_skills(ctx, wm, state.best),
        )
    policy = SelectionPolicy(max_difficulty=cfg.max_difficulty, explore_every=cfg.explore_every)
    best = state.best
    if best is None:
        best_view = "(nothing has passed yet)"
    else:
        perf = perf_text(best.latency_ms, best.score)
        best_view = f"node {best.node_id}, candidate {best.candidate_id[-10:]}: {perf}" + best_evidence(best, ctx.store)
    return render(
        "plan_update",
        task_spec=spec,
        language=cfg.language,
        device_description=ctx.device_description,
        kernel_summary=wm.kernel_summary or "(none yet)",
        open_questions="\n".join(f"- {q}" for q in wm.open_questions) or "(none)",
        tree_view=tree_view(wm),
        frontier_view=frontier_view(wm, policy),
        best_view=best_view,
        evidence="\n\n".join(
            part
            for part in (evidence_view(state.evidence, state, ctx.store, ctx), planner_counters_view(state, ctx))
            if part
        )
        or "(no cycle has ended since the last plan)",
        measurement_legend=LEGEND,
        selection_rules=selection_rules(policy),
        max_new_nodes=cfg.max_new_nodes,
        competitors=competitors_section(ctx, best),
        edit_schema=schema,
        skills=planner_skills(ctx, wm, state.best),
    )


def competitors_section(ctx: SearchContext, best: BestRef | None) -> str:
    """The best known competing kernels (``--compete``) against the run's best, per shape."""
    competitors = ctx.config.competitors
    best_eval = None
    if best is not None:
        try:
            best_eval = ctx.store.get_evaluation(best.evaluation_id)
        except KeyError:
            best_eval = None
    codes = {c.candidate_id: ctx.store.get_candidate(c.candidate_id).code for c in competitors if c.candidate_id}
    return competitors_view(competitors, best_eval, codes)


def selection_rules(policy: SelectionPolicy) -> str:
    """How the next actions are chosen from the frontier, for the planner (its scores and deletions steer it)."""
    text = (
        "The frontier runs in the order shown: your score first, then the less-explored family, lower difficulty, "
        f"higher rating; actions above difficulty {policy.max_difficulty} wait while easier ones exist."
    )
    if policy.explore_every > 0:
        text += (
            f" Every {policy.explore_every}th cycle explores: it runs the first action of the family (a branch under "
            "the root) that has had the fewest cycles, whatever its score or difficulty, while another family has had "
            "more. A family stays open while it has an open action: delete an action you judge pointless rather than "
            "leaving it with a low score."
        )
    return text


def seed_view(wm: WorldModel, store: Store) -> str:
    """The seed solution on the root (``--seed-from``), whole, so the first plan is about improving it."""
    seed = wm.root.solution
    if seed is None:
        return "(none: the first kernels are written from the spec)"
    ev = store.get_evaluation(seed.evaluation_id)
    code = store.get_candidate(seed.candidate_id).code
    counters = counters_text(ev.counters)
    return (
        f"The search continues from a seed solution attached to the root: {ev.summary()}.\n"
        + (f"{counters}\n" if counters else "")
        + "Plan actions that improve it (they are applied to this code):\n"
        + fenced(code)
    )


def best_evidence(best: BestRef, store: Store) -> str:
    """The best's roofline position, on a line of its own ('' when it has none)."""
    try:
        summary = roofline_summary(store.get_evaluation(best.evaluation_id))
    except KeyError:
        return ""
    return f"\n  {summary}" if summary else ""


def evidence_view(results: list[CycleResult], state: SearchState, store: Store, ctx: SearchContext) -> str:
    """One block per ended cycle (every attempt, its measurements and its code as a diff), then the codes the cycles
    started from, whole (``ksearch.agent.planner_evidence``)."""
    return planner_evidence.evidence_view(
        results,
        state.world_model,
        store,
        run_id=ctx.run_id,
        score=ctx.task.score,
        skill_line=partial(trial_line, ctx),
    )
