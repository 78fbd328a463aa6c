"""Migration m004_skills and the skill tables: exact schema, idempotent writes, missing snapshots named clearly."""

from __future__ import annotations

import pytest
import sqlite_utils

from ksearch.errors import SkillNotFoundError
from ksearch.skills.evidence import Evidence, EvidenceKind
from ksearch.skills.library import freeze_snapshot, library_views, load_snapshot, record_evidence, save_skill
from ksearch.skills.records import Scope, SkillContext, SkillDraft, SkillSource, make_skill
from ksearch.store import Store, migrate
from ksearch.store import skills as skill_store
from tests.helpers.skill_scripts import ONLINE_DRAFT


def test_m004_creates_the_skill_tables():
    db = sqlite_utils.Database(memory=True)
    assert "m004_skills" in migrate(db)
    assert {"skills", "skill_evidence", "skill_snapshots"} <= set(db.table_names())
    assert {c.name for c in db["skills"].columns} == {"id", "source", "category", "intent", "record", "created_at"}
    assert ("skill_id", "skills") in {(fk.column, fk.other_table) for fk in db["skill_evidence"].foreign_keys}
    unique = [ix.columns for ix in db["skill_evidence"].indexes if ix.unique]
    assert ["skill_id", "kind", "run_id", "cycle_id"] in unique


def test_writes_are_idempotent_and_snapshots_are_content_addressed(tmp_path):
    store = Store(tmp_path / "ksearch.db")
    skill = make_skill(
        SkillDraft.model_validate(ONLINE_DRAFT),
        source=SkillSource.MANUAL,
        scope=Scope(families=["softmax"], languages=["triton"], archs=["cpu"]),
    )
    assert save_skill(store, skill) is True and save_skill(store, skill) is False
    trial = Evidence(
        kind=EvidenceKind.TRIAL,
        run_id="r",
        cycle_id="c1",
        task="softmax",
        family="softmax",
        language="triton",
        arch="cpu",
        verdict="passed",
    )
    assert record_evidence(store, skill.skill_id, trial) is True
    assert record_evidence(store, skill.skill_id, trial) is False
    context = SkillContext(family="softmax", language="triton", arch="cpu")
    first, views = freeze_snapshot(store, context)
    assert freeze_snapshot(store, context)[0] == first and store.db["skill_snapshots"].count == 1
    assert load_snapshot(store, first) == views == library_views(store)
    assert freeze_snapshot(store, context.model_copy(update={"arch": "sm90"}))[1] == []  # out of scope there
    with pytest.raises(SkillNotFoundError, match="not in"):
        load_snapshot(store, "skills-sha256:0000")
    assert skill_store.get_skill_row(store, "sk-")["id"] == skill.skill_id  # a unique prefix is enough
    with pytest.raises(SkillNotFoundError, match="no skill"):
        skill_store.get_skill_row(store, "sk-zzz")
    save_skill(
        store,
        make_skill(
            SkillDraft.model_validate({**ONLINE_DRAFT, "category": "other"}), source=SkillSource.MANUAL, scope=Scope()
        ),
    )
    with pytest.raises(SkillNotFoundError, match="ambiguous"):
        skill_store.get_skill_row(store, "sk-")
    store.close()
