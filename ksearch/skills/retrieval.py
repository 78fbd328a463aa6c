"""Which skills a planning step sees, in what order, and as what text; and whether an action may bind one. Pure.

Retrieval is hard filters first (scope: task family, language, architecture, never implicit supersets; not retired;
the typed preconditions against the code the new actions will most likely edit: required features present, no
conflicting feature, not applied already), then similarity. Order: admitted before candidates, then by word overlap
(Jaccard) between the skill's text and the query (task spec and the planner's kernel summary), then by estimated
speedup, then by id. (Which actions an edit script bound to a skill is the search's business:
``ksearch.agent.skill_use``.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ksearch.skills.evidence import SkillStatus, SkillView
from ksearch.skills.features import precondition_problems
from ksearch.skills.records import SkillContext
from ksearch.skills.snapshot import in_scope

_WORD = re.compile(r"[a-z][a-z0-9_]{2,}")
MAX_BLOCK_CHARS = 4000
"""The skills section of a planner prompt stays short (KLineage's lesson on prompt bloat)."""


def exclusion_reasons(view: SkillView, context: SkillContext, code: str | None) -> list[str]:
    """Why a skill must not be offered for ``code`` in ``context`` (empty: it passes every hard filter)."""
    reasons = []
    scope = view.skill.scope
    if not in_scope(view, context):
        reasons.append(
            f"scope {scope.families}/{scope.languages}/{scope.archs} excludes "
            f"{context.family}/{context.language}/{context.arch}"
        )
    if view.status == SkillStatus.RETIRED:
        reasons.append("retired: its evidence says it does not pay off")
    reasons.extend(precondition_problems(view.skill, code, context.arch))
    return reasons


def words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def similarity(view: SkillView, query: str) -> float:
    """Jaccard overlap of the words of the skill (intent, anchor, category, effects, recipe) and of the query."""
    s = view.skill
    mine = words(" ".join([s.category, s.intent, s.anchor, s.recipe, *s.effects]))
    theirs = words(query)
    if not mine or not theirs:
        return 0.0
    return len(mine & theirs) / len(mine | theirs)


@dataclass(frozen=True)
class Retrieved:
    view: SkillView
    similarity: float


def retrieve(views: list[SkillView], context: SkillContext, code: str | None, query: str, k: int) -> list[Retrieved]:
    """The top ``k`` skills that pass the hard filters, ranked (see the module docstring)."""
    eligible = [Retrieved(v, similarity(v, query)) for v in views if not exclusion_reasons(v, context, code)]
    eligible.sort(
        key=lambda r: (
            r.view.status != SkillStatus.ADMITTED,
            -round(r.similarity, 6),
            -(r.view.estimate.speedup or 1.0),
            r.view.skill_id,
        )
    )
    return eligible[: max(0, k)]


def estimate_text(view: SkillView) -> str:
    est = view.estimate
    parts = [f"{est.trials} trials, {est.trials_passed} passed"]
    if est.speedup is not None and est.low is not None and est.high is not None:
        basis = f"{est.paired_trials} paired trials" if est.paired_trials else "source only, shrunk"
        parts.append(f"est x{est.speedup:.2f} [{est.low:.2f}, {est.high:.2f}] ({basis})")
    else:
        parts.append("effect not measured (correctness only)")
    if est.source_speedup is not None:
        parts.append(f"source x{est.source_speedup:.2f}")
    return "; ".join(parts)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def skill_line(view: SkillView) -> str:
    """One compact entry of the planner's skills section."""
    s = view.skill
    label = "ADMITTED" if view.status == SkillStatus.ADMITTED else "candidate, unverified"
    pre = "; ".join(f"{p.category}: {_clip(p.text, 140)}" for p in s.preconditions[:3])
    needs = ", ".join(f.key() for f in s.requires) or "nothing"
    adds = ", ".join(f.key() for f in s.provides)
    risks = "; ".join(_clip(r, 140) for r in view.risks[:2]) or "none recorded"
    return (
        f"- {view.skill_id} [{label}; {estimate_text(view)}]\n"
        f"  intent: {_clip(s.intent, 200)} | at: {s.anchor} | needs: {needs} -> adds: {adds}\n"
        f"  preconditions: {pre}\n"
        f"  risks: {risks}"
    )


def skills_block(
    views: list[SkillView], context: SkillContext, code: str | None, query: str, k: int, snapshot: str | None
) -> str:
    """The planner's skills section: the retrieved skills and how to bind one, or why there are none."""
    if snapshot is None:
        return "(skills are off for this run)"
    chosen = retrieve(views, context, code, query, k)
    where = f"task family {context.family}, language {context.language}, architecture {context.arch}"
    if not chosen:
        return f"(no skill of this run's library snapshot fits {where} and the current code)"
    lines = [
        f"Library snapshot {snapshot}: {len(chosen)} of {len(views)} skills fit {where} and the current best code.",
        "A skill is a verified-elsewhere hypothesis, not a guarantee: the measurement decides. To apply one, set the",
        'action\'s "skill_id" to its id (one skill per action); the coder then gets its full recipe and risks.',
    ]
    text = "\n".join(lines)
    for r in chosen:
        entry = skill_line(r.view)
        if len(text) + len(entry) + 1 > MAX_BLOCK_CHARS:
            break
        text += "\n" + entry
    return text


def coder_skill_text(view: SkillView) -> str:
    """What the coder gets for an action bound to a skill: KLineage's materialisation payload, without evidence."""
    s = view.skill
    lines = [
        f"Skill {view.skill_id} ({s.category}, {view.status.value}): {s.intent}",
        f"Where: {s.anchor}",
        f"Recipe: {s.recipe}",
    ]
    if s.before_snippet or s.after_snippet:
        lines.append(f"Before:\n{s.before_snippet or '(not given)'}\nAfter:\n{s.after_snippet or '(not given)'}")
    lines.append("Preconditions (check them against the code; if one is violated, say so and do the safe thing):")
    lines.extend(f"- {p.category}: {p.text}" for p in s.preconditions)
    if view.risks:
        lines.append("Risks:")
        lines.extend(f"- {r}" for r in view.risks)
    lines.append("Implement only this transformation; keep unrelated mechanisms as they are.")
    return "\n".join(lines)


def binding_errors(
    node_id: str, skill_id: str, views: dict[str, SkillView], context: SkillContext, parent_code: str | None
) -> list[str]:
    """Why node ``node_id`` may not apply skill ``skill_id`` to its parent's code (empty: it may)."""
    view = views.get(skill_id)
    where = f"node '{node_id}': skill_id '{skill_id}'"
    if view is None:
        known = ", ".join(sorted(views)) or "none"
        return [f"{where} is not in this run's skill library (known: {known}); remove it or use a listed id"]
    return [f"{where} does not fit: {reason}" for reason in exclusion_reasons(view, context, parent_code)]
