"""The search's side of skills: what the nodes call. Using the run's frozen library (the planner's skills section,
the check of the skills an edit script binds, the coder's recipe for a bound action, the outcome line in the
planner's evidence) and what every ended cycle teaches it (a trial on the skill an action applied, or a skill lifted
from a significantly faster edge). The skills themselves are ``ksearch.skills``.

Always the run's snapshot (``SearchContext.skills``), never the live library, so a resume or a replay sees the same
skills; the code that preconditions are checked against comes from the store. Learning writes go to the live
library, and every write is idempotent: LLM calls by call key, paired comparisons by (base, candidate, evaluation
key), skills by content hash, evidence by (skill, kind, run, cycle). So a node re-run after a crash pays for nothing
twice and records nothing twice.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import structlog
from langgraph.errors import GraphBubbleUp

from ksearch.agent.context import SearchContext
from ksearch.agent.promotion import paired_comparison
from ksearch.agent.state import BestRef, CycleResult
from ksearch.agent.world_model import Action, WorldModel
from ksearch.errors import BudgetExceededError, ModelReplyError
from ksearch.prompts import clip
from ksearch.skills.evidence import Evidence, EvidenceKind, is_held_out
from ksearch.skills.library import find_evidence, load_evidence, record_evidence, save_skill
from ksearch.skills.lifting import LiftInput, lift_skill, measurement_text
from ksearch.skills.records import Skill, SkillSource
from ksearch.skills.retrieval import binding_errors, coder_skill_text, skills_block

log = structlog.get_logger(__name__)

Emit = Callable[[str, dict[str, Any]], None]


# --------------------------------------------------------------------------------------------------------------------
# Using the run's library


def _code(ctx: SearchContext, candidate_id: str | None) -> str | None:
    return ctx.store.get_candidate(candidate_id).code if candidate_id else None


def planner_skills(ctx: SearchContext, wm: WorldModel, best: BestRef | None) -> str:
    """Skills retrieved for this planning step: hard filters against the run's best code (else the seed, else no
    code), ranked by similarity to the task and the planner's own summary of the kernel."""
    cfg = ctx.config
    if not cfg.skills or cfg.skill_snapshot is None or ctx.skill_context is None:
        return "(skills are off for this run)"
    base = best.candidate_id if best is not None else (wm.root.solution.candidate_id if wm.root.solution else None)
    query = "\n".join([ctx.task.spec(cfg.language), wm.kernel_summary, *wm.open_questions])
    return skills_block(
        ctx.skills, ctx.skill_context, _code(ctx, base), query, cfg.skills_in_prompt, cfg.skill_snapshot
    )


def new_bindings(before: WorldModel, after: WorldModel) -> list[tuple[str, str]]:
    """(node id, skill id) for every action the edit script bound to a skill (new nodes, or a changed binding)."""
    out = []
    for node_id, node in after.nodes.items():
        skill_id = node.action.skill_id if node.action else None
        if not skill_id:
            continue
        old = before.nodes.get(node_id)
        old_id = old.action.skill_id if old is not None and old.action else None
        if old_id != skill_id:
            out.append((node_id, skill_id))
    return sorted(out)


def check_bindings(ctx: SearchContext, before: WorldModel, after: WorldModel) -> list[str]:
    """Errors for every action the script bound to a skill that is unknown, retired, out of scope, or whose typed
    preconditions its parent's code violates; the whole script is then rejected like any invalid edit."""
    bindings = new_bindings(before, after)
    if not bindings:
        return []
    if ctx.skill_context is None or not ctx.config.skills:
        return [f"node '{n}': skill_id '{s}' given, but skills are off for this run" for n, s in bindings]
    views = {v.skill_id: v for v in ctx.skills}
    errors = []
    for node_id, skill_id in bindings:
        parent_id = after.nodes[node_id].parent_id
        parent = after.nodes.get(parent_id) if parent_id else None
        code = _code(ctx, parent.solution.candidate_id if parent is not None and parent.solution else None)
        errors.extend(binding_errors(node_id, skill_id, views, ctx.skill_context, code))
    return errors


def coder_skill(ctx: SearchContext, action: Action) -> str:
    """The recipe block appended to the coder's action text, or '' for an action without a skill."""
    if not action.skill_id:
        return ""
    view = next((v for v in ctx.skills if v.skill_id == action.skill_id), None)
    return "" if view is None else "\n\n# Skill this action applies\n" + coder_skill_text(view)


def trial_line(ctx: SearchContext, skill_id: str, cycle_id: str) -> str:
    """One line for the planner's evidence: what the cycle's application of the skill was recorded as."""
    trial = find_evidence(ctx.store, skill_id, EvidenceKind.TRIAL.value, ctx.run_id, cycle_id)
    if trial is None:
        return f"Applied skill {skill_id}; no trial was recorded."
    if trial.speedup is not None:
        measured = f"paired speedup over the parent x{trial.speedup:.3f} [{trial.ci_low:.3f}, {trial.ci_high:.3f}]"
    else:
        measured = "no paired measurement (untimed, failed, or no parent code)"
    verified = "verified" if trial.verified else "not verified"
    return f"Applied skill {skill_id}: trial recorded as {trial.verdict}, {measured}; {verified}."


# --------------------------------------------------------------------------------------------------------------------
# Paired comparisons for skills


def edge_comparison(ctx: SearchContext, base_id: str, candidate_id: str) -> dict[str, Any] | None:
    """The paired comparison of an edge (incumbent = base, challenger = candidate): stored, or measured on a leased
    GPU when both candidates passed timed evaluations; None when nothing can be timed (the CPU) or the measurement
    failed (a failed re-measurement never stops the run)."""
    return paired_comparison(ctx.store, base_id, candidate_id, ctx.eval_key, partial(_measure_edge, ctx))


def _measure_edge(ctx: SearchContext, base_id: str, candidate_id: str) -> Any:
    if ctx.compare is None:
        return None
    for cid in (base_id, candidate_id):
        found = ctx.store.find_evaluation(cid, ctx.eval_key)
        if found is None or not (found[1].passed and found[1].timed):
            return None
    base, candidate = ctx.store.get_candidate(base_id), ctx.store.get_candidate(candidate_id)
    try:
        with ctx.device_lease() as device:
            return ctx.compare(
                ctx.eval_request(base, device), ctx.eval_request(candidate, device), rounds=ctx.config.promotion_rounds
            )
    except GraphBubbleUp:  # a pause (the comparison waits for the device): not a failed measurement
        raise
    except Exception as exc:  # noqa: BLE001 - the skill loses a measurement; the run goes on
        log.warning(
            "skills.compare_failed", run_id=ctx.run_id, base=base_id, candidate=candidate_id, error=str(exc)[:300]
        )
        return None


def _paired_fields(record: dict[str, Any] | None) -> dict[str, float | None]:
    if record is None:
        return {"speedup": None, "ci_low": None, "ci_high": None}
    return {k: float(record[k]) for k in ("speedup", "ci_low", "ci_high")}


# --------------------------------------------------------------------------------------------------------------------
# What every ended cycle teaches


def learn_from_cycles(ctx: SearchContext, wm: WorldModel, results: list[CycleResult], emit: Emit) -> None:
    """For each ended cycle: a trial on the skill its action applied, or (on a significantly faster edge of an action
    without a skill) a newly lifted candidate skill."""
    if not ctx.config.skills or ctx.skill_context is None:
        return
    for result in sorted(results, key=lambda r: r.cycle_id):
        node = wm.nodes.get(result.node_id)
        if node is None or node.action is None:
            continue
        if node.action.skill_id:
            record_trial(ctx, result, node.action.skill_id, emit)
        elif ctx.config.lift_skills:
            lift_from_edge(ctx, result, wm, emit)


def record_trial(ctx: SearchContext, result: CycleResult, skill_id: str, emit: Emit) -> Evidence | None:
    """Append the cycle's outcome to the skill's verification log: verdict, paired speedup over the parent's code
    where it can be timed, and whether the code it was applied to is held out from the skill's origins."""
    assert ctx.skill_context is not None
    view = next((v for v in ctx.skills if v.skill_id == skill_id), None)
    if view is None:
        log.warning("skills.trial_for_unknown_skill", run_id=ctx.run_id, skill_id=skill_id, cycle_id=result.cycle_id)
        return None
    save_skill(ctx.store, view.skill)  # the snapshot's copy, should the live library have lost it
    evaluation_id = result.best_evaluation_id if result.passed else result.last_evaluation_id
    candidate_id = result.best_candidate_id if result.passed else result.last_candidate_id
    evaluation = ctx.store.get_evaluation(evaluation_id) if evaluation_id else None
    record = None
    if evaluation is not None and evaluation.passed and evaluation.timed and result.base_candidate_id and candidate_id:
        record = edge_comparison(ctx, result.base_candidate_id, candidate_id)
    origins = [e for e in load_evidence(ctx.store, skill_id) if e.kind == EvidenceKind.ORIGIN]
    sc = ctx.skill_context
    note = (
        ""
        if evaluation is not None and evaluation.passed
        else (evaluation.summary() if evaluation is not None else (result.last_error or "no code"))
    )
    trial = Evidence(
        kind=EvidenceKind.TRIAL,
        run_id=ctx.run_id,
        cycle_id=result.cycle_id,
        node_id=result.node_id,
        task=ctx.config.task,
        family=sc.family,
        language=sc.language,
        arch=sc.arch,
        base_candidate_id=result.base_candidate_id,
        candidate_id=candidate_id,
        verdict=evaluation.verdict.value if evaluation is not None else "no_code",
        timed=bool(evaluation is not None and evaluation.timed),
        held_out=is_held_out(ctx.config.task, result.base_candidate_id, origins),
        note=clip(note, 300),
        **_paired_fields(record),
    )
    if record_evidence(ctx.store, skill_id, trial):
        log.info(
            "skills.trial",
            run_id=ctx.run_id,
            skill_id=skill_id,
            cycle_id=result.cycle_id,
            verdict=trial.verdict,
            speedup=trial.speedup,
            held_out=trial.held_out,
        )
    emit(
        "skill_trial",
        {
            "skill_id": skill_id,
            "cycle_id": result.cycle_id,
            "verdict": trial.verdict,
            "speedup": trial.speedup,
            "verified": trial.verified,
            "held_out": trial.held_out,
        },
    )
    return trial


def lift_from_edge(ctx: SearchContext, result: CycleResult, wm: WorldModel, emit: Emit) -> Skill | None:
    """Lift a candidate skill from parent -> child when the child passed, was timed, and a paired re-measurement
    shows it significantly faster (the lower end of the 95 % interval reaches ``skill_lift_min_speedup``)."""
    base_id, child_id = result.base_candidate_id, result.best_candidate_id
    if not (result.passed and base_id and child_id and result.best_evaluation_id):
        return None
    child = ctx.store.get_evaluation(result.best_evaluation_id)
    if not child.timed:
        return None  # the CPU interpreter times nothing: there is no effect to learn from
    if result.base_score is not None and child.score is not None and child.score <= result.base_score:
        return None  # not even the single measurement is better: spend no GPU time on a paired one
    record = edge_comparison(ctx, base_id, child_id)
    if record is None or not record.get("improved") or float(record["ci_low"]) < ctx.config.skill_lift_min_speedup:
        return None
    node = wm.nodes[result.node_id]
    assert node.action is not None and ctx.skill_context is not None
    item = LiftInput(
        origin=(
            f"a search edge: run {ctx.run_id}, node {node.id} (cycle {result.cycle_id}) improved on its parent's code"
        ),
        context=ctx.skill_context,
        task_spec=ctx.task.spec(ctx.config.language),
        change=f"Action: {node.action.title}\n{node.action.description}".strip(),
        before_code=ctx.store.get_candidate(base_id).code,
        after_code=ctx.store.get_candidate(child_id).code,
        measurement=measurement_text(record, what="child versus parent"),
    )
    try:
        skill = lift_skill(
            ctx.llm, f"lift:{result.cycle_id}", item, source=SkillSource.SEARCH, max_repairs=ctx.config.max_plan_repairs
        )
    except (ModelReplyError, BudgetExceededError) as exc:
        log.warning("skills.lift_failed", run_id=ctx.run_id, cycle_id=result.cycle_id, error=str(exc)[:300])
        return None
    save_skill(ctx.store, skill)
    sc = ctx.skill_context
    record_evidence(
        ctx.store,
        skill.skill_id,
        Evidence(
            kind=EvidenceKind.ORIGIN,
            run_id=ctx.run_id,
            cycle_id=result.cycle_id,
            node_id=node.id,
            task=ctx.config.task,
            family=sc.family,
            language=sc.language,
            arch=sc.arch,
            base_candidate_id=base_id,
            candidate_id=child_id,
            verdict="passed",
            timed=True,
            note=f"search edge: {node.action.title}",
            **_paired_fields(record),
        ),
    )
    log.info("skills.lifted", run_id=ctx.run_id, skill_id=skill.skill_id, cycle_id=result.cycle_id)
    emit("skill_lifted", {"skill_id": skill.skill_id, "intent": skill.intent, "cycle_id": result.cycle_id})
    return skill
