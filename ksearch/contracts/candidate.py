"""Candidates: kernel source code identified by content, never by name."""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

HASH_PREFIX = "sha256-v1:"


class Language(StrEnum):
    TRITON = "triton"
    CUDA = "cuda"


class Candidate(BaseModel):
    """A complete kernel module as the evaluator runs it. Frozen: its id is a hash of what changes behaviour."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: str
    language: Language
    code: str
    entry_point: str = "kernel"

    @property
    def id(self) -> str:
        return candidate_id(self.task, self.language, self.code, self.entry_point)


def candidate_id(task: str, language: str, code: str, entry_point: str) -> str:
    """Canonical-JSON sha256 with a version prefix, so a change of hashing is detectable."""
    canonical = json.dumps(
        {"task": task, "language": str(language), "code": code, "entry_point": entry_point},
        sort_keys=True,
        separators=(",", ":"),
    )
    return HASH_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()
