"""The skill library in the workspace database, as typed records: save, load, evidence, views and frozen snapshots.

Thin: the rules are in ``ksearch.skills.records`` and ``ksearch.skills.evidence``, the SQL in
``ksearch.store.skills``.
"""

from __future__ import annotations

import json

from pydantic import TypeAdapter

from ksearch.skills.evidence import Evidence, SkillView, summarize
from ksearch.skills.records import Skill, SkillContext
from ksearch.skills.snapshot import freeze, snapshot_id
from ksearch.store import Store
from ksearch.store import skills as skill_store

_VIEWS = TypeAdapter(list[SkillView])


def save_skill(store: Store, skill: Skill) -> bool:
    """Store a skill under its content hash; True when it was new."""
    return skill_store.ensure_skill(
        store,
        skill.skill_id,
        source=skill.source.value,
        category=skill.category,
        intent=skill.intent,
        record=skill.model_dump_json(),
    )


def load_skill(store: Store, skill_id: str) -> Skill:
    """By id or unique id prefix (SkillNotFoundError otherwise)."""
    return Skill.model_validate_json(skill_store.get_skill_row(store, skill_id)["record"])


def record_evidence(store: Store, skill_id: str, evidence: Evidence) -> bool:
    """Append to a skill's evidence log once per (kind, run, cycle); True when it was new."""
    columns = {
        "kind": evidence.kind.value,
        "run_id": evidence.run_id,
        "cycle_id": evidence.cycle_id,
        "node_id": evidence.node_id,
        "task": evidence.task,
        "arch": evidence.arch,
        "base_candidate_id": evidence.base_candidate_id,
        "candidate_id": evidence.candidate_id,
        "verdict": evidence.verdict,
        "speedup": evidence.speedup,
        "held_out": int(evidence.held_out),
        "imported": int(evidence.imported),
    }
    return skill_store.add_skill_evidence(store, skill_id, columns, evidence.model_dump_json())


def load_evidence(store: Store, skill_id: str) -> list[Evidence]:
    return [Evidence.model_validate_json(r["record"]) for r in skill_store.list_skill_evidence(store, skill_id)]


def find_evidence(store: Store, skill_id: str, kind: str, run_id: str, cycle_id: str) -> Evidence | None:
    row = skill_store.find_skill_evidence(store, skill_id, kind, run_id, cycle_id)
    return Evidence.model_validate_json(row["record"]) if row else None


def skill_view(store: Store, skill_id: str) -> SkillView:
    skill = load_skill(store, skill_id)
    return summarize(skill, load_evidence(store, skill.skill_id))


def library_views(store: Store) -> list[SkillView]:
    """Every skill in the workspace with its status and estimate derived from its evidence now."""
    evidence: dict[str, list[Evidence]] = {}
    for row in skill_store.list_skill_evidence(store):
        evidence.setdefault(row["skill_id"], []).append(Evidence.model_validate_json(row["record"]))
    views = []
    for row in skill_store.list_skill_rows(store):
        skill = Skill.model_validate_json(row["record"])
        views.append(summarize(skill, evidence.get(row["id"], [])))
    return views


def freeze_snapshot(store: Store, context: SkillContext) -> tuple[str, list[SkillView]]:
    """Freeze the part of the library a run may use (in scope, not retired) under its content hash."""
    views = freeze(library_views(store), context)
    sid = snapshot_id(views)
    skill_store.ensure_skill_snapshot(store, sid, json.dumps([v.model_dump(mode="json") for v in views]))
    return sid, views


def load_snapshot(store: Store, sid: str) -> list[SkillView]:
    """A run's frozen library, exactly as it was frozen (SkillNotFoundError when missing)."""
    return _VIEWS.validate_json(skill_store.get_skill_snapshot(store, sid))
