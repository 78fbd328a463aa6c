"""Learning skills: lifting a verified change into a skill (an LLM role, ``skill_lifter``), and the evidence that
every ended cycle leaves on the skills it applied.

Used by the ``learn_skills`` node after each prune (search edges, trials) and by the ``skills learn`` flow (the
expert walk's accepted steps). Every write is idempotent: LLM calls by call key, paired comparisons by (base,
candidate, evaluation key), skills by content hash, evidence by (skill, kind, run, cycle). So a node re-run after a
crash pays for nothing twice and records nothing twice.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from ksearch.agent.context import SearchContext
from ksearch.llm.client import LLMClient
from ksearch.agent.promotion import comparison_record
from ksearch.agent.prompting import clip, render
from ksearch.agent.skill_library import load_evidence, record_evidence, save_skill
from ksearch.agent.skills import (
    Evidence,
    EvidenceKind,
    Scope,
    Skill,
    SkillContext,
    SkillDraft,
    SkillSource,
    draft_contract_errors,
    is_held_out,
    make_skill,
)
from ksearch.agent.state import CycleResult
from ksearch.agent.world_model import WorldModel
from ksearch.errors import BudgetExceededError, ModelReplyError
from ksearch.store import ensure_comparison, find_comparison

log = structlog.get_logger(__name__)

LIFTER_ROLE = "skill_lifter"

Emit = Callable[[str, dict[str, Any]], None]


# --------------------------------------------------------------------------------------------------------------------
# Lifting


@dataclass(frozen=True)
class LiftInput:
    """One verified change, forward direction (before = simpler, after = better), and what was measured."""

    origin: str
    """Where it comes from, in words (a search edge, or a step of an expert walk)."""
    context: SkillContext
    task_spec: str
    change: str
    """The action that made it, or the reversed removal of an expert walk."""
    before_code: str
    after_code: str
    measurement: str
    failures: list[str] = field(default_factory=list)


def lift_prompt(item: LiftInput) -> str:
    diff = "".join(
        difflib.unified_diff(
            item.before_code.splitlines(keepends=True), item.after_code.splitlines(keepends=True), "before", "after"
        )
    )
    return render(
        "skill_lift",
        origin=item.origin,
        family=item.context.family,
        language=item.context.language,
        arch=item.context.arch,
        task_spec=clip(item.task_spec, 4000),
        change=item.change,
        measurement=item.measurement,
        before_code=clip(item.before_code, 8000),
        after_code=clip(item.after_code, 8000),
        diff=clip(diff or "(no textual difference)", 6000),
        failures="\n".join(f"- {f}" for f in item.failures) or "(none)",
        schema=json.dumps(SkillDraft.model_json_schema(), separators=(",", ":")),
    )


def lift_skill(llm: LLMClient, call_key: str, item: LiftInput, *, source: SkillSource, max_repairs: int = 2) -> Skill:
    """Ask the lifter for a draft, check its feature contract against both versions of the code (a violated contract
    goes back to the model with the reasons), and scope it to ``item.context``. Raises ModelReplyError when no
    usable draft came back, BudgetExceededError when the budget is spent."""

    def contract(data: dict[str, Any]) -> list[str]:
        return draft_contract_errors(SkillDraft.model_validate(data), item.before_code, item.after_code, item.context.arch)

    draft, _calls = llm.complete_json(
        LIFTER_ROLE, call_key, lift_prompt(item), model_cls=SkillDraft, validate=contract, max_repairs=max_repairs
    )
    scope = Scope(families=[item.context.family], languages=[item.context.language], archs=[item.context.arch])
    return make_skill(draft, source=source, scope=scope)


def measurement_text(record: dict[str, Any] | None, *, what: str) -> str:
    """A paired comparison as one sentence for prompts and notes (or why there is none)."""
    if record is None:
        return f"{what}: not timed (CPU interpreter: correctness only); the effect is not measured."
    return (
        f"{what}: paired, interleaved re-measurement on {record.get('device') or 'the GPU'}: speedup "
        f"x{record['speedup']:.4f}, 95% CI [{record['ci_low']:.4f}, {record['ci_high']:.4f}] "
        f"over {record.get('rounds') or '?'} rounds"
    )


# --------------------------------------------------------------------------------------------------------------------
# Paired comparisons for skills


def paired_comparison(ctx: SearchContext, base_id: str, candidate_id: str) -> dict[str, Any] | None:
    """The stored paired comparison (incumbent = base, challenger = candidate), measured on a leased GPU when missing
    and both candidates passed timed evaluations; None when nothing can be timed (the CPU) or the measurement
    failed (a failed re-measurement never stops the run)."""
    record = find_comparison(ctx.store, base_id, candidate_id, ctx.eval_key)
    if record is not None or ctx.compare is None:
        return record
    for cid in (base_id, candidate_id):
        found = ctx.store.find_evaluation(cid, ctx.eval_key)
        if found is None or not (found[1].passed and found[1].timed):
            return None
    base, candidate = ctx.store.get_candidate(base_id), ctx.store.get_candidate(candidate_id)
    try:
        with ctx.device_lease() as device:
            measured = ctx.compare(
                ctx.eval_request(base, device), ctx.eval_request(candidate, device), rounds=ctx.config.promotion_rounds
            )
    except Exception as exc:  # noqa: BLE001 - the skill loses a measurement; the run goes on
        log.warning("skills.compare_failed", run_id=ctx.run_id, base=base_id, candidate=candidate_id, error=str(exc)[:300])
        return None
    record = comparison_record(measured)
    ensure_comparison(ctx.store, base_id, candidate_id, ctx.eval_key, record)
    return record


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
        record = paired_comparison(ctx, result.base_candidate_id, candidate_id)
    origins = [e for e in load_evidence(ctx.store, skill_id) if e.kind == EvidenceKind.ORIGIN]
    sc = ctx.skill_context
    note = "" if evaluation is not None and evaluation.passed else (
        evaluation.summary() if evaluation is not None else (result.last_error or "no code")
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
        log.info("skills.trial", run_id=ctx.run_id, skill_id=skill_id, cycle_id=result.cycle_id,
                 verdict=trial.verdict, speedup=trial.speedup, held_out=trial.held_out)
    emit("skill_trial", {"skill_id": skill_id, "cycle_id": result.cycle_id, "verdict": trial.verdict,
                         "speedup": trial.speedup, "verified": trial.verified, "held_out": trial.held_out})
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
    record = paired_comparison(ctx, base_id, child_id)
    if record is None or not record.get("improved") or float(record["ci_low"]) < ctx.config.skill_lift_min_speedup:
        return None
    node = wm.nodes[result.node_id]
    assert node.action is not None and ctx.skill_context is not None
    item = LiftInput(
        origin=f"a search edge: run {ctx.run_id}, node {node.id} (cycle {result.cycle_id}) improved on its parent's code",
        context=ctx.skill_context,
        task_spec=ctx.task.spec(ctx.config.language),
        change=f"Action: {node.action.title}\n{node.action.description}".strip(),
        before_code=ctx.store.get_candidate(base_id).code,
        after_code=ctx.store.get_candidate(child_id).code,
        measurement=measurement_text(record, what="child versus parent"),
    )
    try:
        skill = lift_skill(ctx.llm, f"lift:{result.cycle_id}", item, source=SkillSource.SEARCH,
                           max_repairs=ctx.config.max_plan_repairs)
    except (ModelReplyError, BudgetExceededError) as exc:
        log.warning("skills.lift_failed", run_id=ctx.run_id, cycle_id=result.cycle_id, error=str(exc)[:300])
        return None
    save_skill(ctx.store, skill)
    sc = ctx.skill_context
    record_evidence(
        ctx.store,
        skill.skill_id,
        Evidence(
            kind=EvidenceKind.ORIGIN, run_id=ctx.run_id, cycle_id=result.cycle_id, node_id=node.id,
            task=ctx.config.task, family=sc.family, language=sc.language, arch=sc.arch,
            base_candidate_id=base_id, candidate_id=child_id, verdict="passed", timed=True,
            note=f"search edge: {node.action.title}", **_paired_fields(record),
        ),
    )  # fmt: skip
    log.info("skills.lifted", run_id=ctx.run_id, skill_id=skill.skill_id, cycle_id=result.cycle_id)
    emit("skill_lifted", {"skill_id": skill.skill_id, "intent": skill.intent, "cycle_id": result.cycle_id})
    return skill
