"""Frozen snapshots of the library: the part a run may use (in scope, not retired), under a content hash. Pure."""

from __future__ import annotations

import hashlib
import json

from ksearch.skills.evidence import SkillStatus, SkillView
from ksearch.skills.records import SkillContext, scope_matches

SNAPSHOT_PREFIX = "skills-sha256:"


def snapshot_id(views: list[SkillView]) -> str:
    """Content hash of a frozen library: the same skills with the same derived numbers give the same id."""
    payload = [v.model_dump(mode="json") for v in sorted(views, key=lambda v: v.skill_id)]
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return SNAPSHOT_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()[:16]


def in_scope(view: SkillView, context: SkillContext) -> bool:
    scope = view.skill.scope
    return (
        scope_matches(scope.families, context.family)
        and scope_matches(scope.languages, context.language)
        and scope_matches(scope.archs, context.arch)
    )


def freeze(views: list[SkillView], context: SkillContext) -> list[SkillView]:
    """The part of the library a run may use: in scope for its family, language and arch, and not retired."""
    kept = [v for v in views if in_scope(v, context) and v.status != SkillStatus.RETIRED]
    return sorted(kept, key=lambda v: v.skill_id)
