"""Skill tables of the workspace database (migration ``m004_skills``): records, evidence log, frozen snapshots.

The store keeps JSON text and a few indexed columns; the typed records and every rule derived from them live in
``ksearch.skills``. Writes are idempotent: a skill is keyed by its content hash, an evidence record by
(skill, kind, run, cycle), a snapshot by its content hash, so a node or a command re-run after a crash writes nothing
twice.
"""

from __future__ import annotations

import time
from typing import Any

from ksearch.errors import SkillNotFoundError
from ksearch.store.store import Store


def ensure_skill(store: Store, skill_id: str, *, source: str, category: str, intent: str, record: str) -> bool:
    """Insert a skill once; returns True when it was new."""
    with store._write() as db:
        before = db["skills"].count_where("id = ?", [skill_id])
        if before:
            return False
        db["skills"].insert(
            {
                "id": skill_id,
                "source": source,
                "category": category,
                "intent": intent,
                "record": record,
                "created_at": time.time(),
            }
        )
        return True


def get_skill_row(store: Store, skill_id: str) -> dict[str, Any]:
    """The skill with this id, or with this unique id prefix; SkillNotFoundError otherwise."""
    rows = store._query("select * from skills where id = ?", [skill_id])
    if not rows:
        rows = store._query("select * from skills where id like ? order by id", [skill_id + "%"])
        if len(rows) > 1:
            raise SkillNotFoundError(f"skill id prefix {skill_id!r} is ambiguous ({len(rows)} skills match)")
    if not rows:
        raise SkillNotFoundError(f"no skill {skill_id!r} in {store.path}")
    return rows[0]


def list_skill_rows(store: Store) -> list[dict[str, Any]]:
    return store._query("select * from skills order by created_at, id")


def add_skill_evidence(store: Store, skill_id: str, columns: dict[str, Any], record: str) -> bool:
    """Append one evidence record once per (skill, kind, run, cycle); returns True when it was new."""
    key = [skill_id, columns["kind"], columns["run_id"], columns["cycle_id"]]
    with store._write() as db:
        if db["skill_evidence"].count_where("skill_id = ? and kind = ? and run_id = ? and cycle_id = ?", key):
            return False
        db["skill_evidence"].insert({**columns, "skill_id": skill_id, "record": record, "created_at": time.time()})
        return True


def list_skill_evidence(store: Store, skill_id: str | None = None) -> list[dict[str, Any]]:
    """Evidence rows in the order they were recorded (all skills when ``skill_id`` is None)."""
    if skill_id is None:
        return store._query("select * from skill_evidence order by id")
    return store._query("select * from skill_evidence where skill_id = ? order by id", [skill_id])


def find_skill_evidence(store: Store, skill_id: str, kind: str, run_id: str, cycle_id: str) -> dict[str, Any] | None:
    rows = store._query(
        "select * from skill_evidence where skill_id = ? and kind = ? and run_id = ? and cycle_id = ?",
        [skill_id, kind, run_id, cycle_id],
    )
    return rows[0] if rows else None


def ensure_skill_snapshot(store: Store, snapshot_id: str, skills: str) -> None:
    """Freeze a library once under its content hash."""
    with store._write() as db:
        db["skill_snapshots"].insert({"id": snapshot_id, "skills": skills, "created_at": time.time()}, ignore=True)


def get_skill_snapshot(store: Store, snapshot_id: str) -> str:
    """The frozen library's JSON; SkillNotFoundError when the workspace lost it."""
    rows = store._query("select skills from skill_snapshots where id = ?", [snapshot_id])
    if not rows:
        raise SkillNotFoundError(
            f"the run's skill snapshot {snapshot_id} is not in {store.path}",
            hint="the run was started in another workspace; resume it there",
        )
    return rows[0]["skills"]
