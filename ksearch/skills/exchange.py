"""The exchange format of ``ksearch skills export`` and ``import``: skills with their evidence logs, as JSON."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ksearch.skills.evidence import Evidence
from ksearch.skills.records import Skill

EXPORT_FORMAT = "ksearch-skills"


class SkillRecord(BaseModel):
    """One skill with its evidence log, as exported."""

    model_config = ConfigDict(extra="forbid")

    skill: Skill
    evidence: list[Evidence] = Field(default_factory=list)


class SkillExport(BaseModel):
    """The file ``ksearch skills export`` writes and ``import`` reads (JSON). Skill ids are recomputed on import
    from the content, so an edited skill gets a new id."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["ksearch-skills"] = EXPORT_FORMAT
    version: Literal[1] = 1
    skills: list[SkillRecord] = Field(default_factory=list)
