"""Using the run's frozen skill library inside the search: the planner's skills section, the check of the skills
that an edit script binds, the coder's recipe for a bound action, and the outcome line in the planner's evidence.

Always the run's snapshot (``SearchContext.skills``), never the live library, so a resume or a replay sees the same
skills; the code that preconditions are checked against comes from the store.
"""

from __future__ import annotations

from ksearch.agent.context import SearchContext
from ksearch.agent.skill_library import find_evidence
from ksearch.agent.skill_retrieval import binding_errors, coder_skill_text, new_bindings, skills_block
from ksearch.agent.skills import EvidenceKind
from ksearch.agent.state import BestRef
from ksearch.agent.world_model import Action, WorldModel


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
    return skills_block(ctx.skills, ctx.skill_context, _code(ctx, base), query, cfg.skills_in_prompt, cfg.skill_snapshot)


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
