"""Skill records (after KLineage, arXiv 2605.28213): what a skill is, where it applies, and the context it is used in.

A *skill* is one semantic code transformation (never a parameter sweep: tile sizes and warp counts belong in its
recipe) with what it is for (intent), where it applies (anchor), how to do it (recipe), when it is sound (typed
preconditions, required and conflicting code features, scope) and what it did (effects, risks; its evidence is in
``ksearch.skills.evidence``). Pure: no I/O, deterministic.
"""

from __future__ import annotations

import hashlib
import json
import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, computed_field, model_validator

# --------------------------------------------------------------------------------------------------------------------
# Vocabulary

ANY = "*"
"""Scope wildcard: matches every task family, language or architecture."""

HARDWARE_LOCUS = "hardware"
"""A feature at this locus is a hardware capability (``Feature("hardware", "tma")``), checked against the arch."""

HARDWARE_CAPABILITIES: dict[str, frozenset[str]] = {
    "cpu": frozenset(),
    "sm70": frozenset({"tensor_cores", "fp16"}),
    "sm75": frozenset({"tensor_cores", "fp16"}),
    "sm80": frozenset({"tensor_cores", "fp16", "bf16", "tf32", "cp_async"}),
    "sm86": frozenset({"tensor_cores", "fp16", "bf16", "tf32", "cp_async"}),
    "sm89": frozenset({"tensor_cores", "fp16", "bf16", "tf32", "cp_async", "fp8"}),
    "sm90": frozenset({"tensor_cores", "fp16", "bf16", "tf32", "cp_async", "fp8", "tma", "wgmma", "clusters"}),
    "sm100": frozenset(
        {"tensor_cores", "fp16", "bf16", "tf32", "cp_async", "fp8", "fp4", "tma", "clusters", "tcgen05"}
    ),
}
"""What each architecture offers, by name. Deliberately no implicit supersets: sm100 has no ``wgmma``."""

PreconditionCategory = Literal["data_types", "layout", "storage", "pipeline", "hardware", "other"]
"""KLineage's five categories of preconditions, plus 'other'."""

Line = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=600)]
ShortName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=80)]
DetectString = Annotated[str, StringConstraints(min_length=1, max_length=120)]


class Frozen(BaseModel):
    """Immutable, no unknown fields: every skill record."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Feature(Frozen):
    """A mechanism at a semantic locus, e.g. ``softmax.row_loop / online_softmax``; or a hardware capability."""

    locus: ShortName
    """Where in the kernel: 'mainloop', 'epilogue', 'softmax.row_loop', 'launch'; 'hardware' for a capability."""
    name: ShortName
    """What: 'tensor_core_dot', 'online_softmax', 'sw_pipeline', 'split_k'; a capability name at 'hardware'."""
    detect: list[DetectString] = Field(default_factory=list, max_length=5)
    """Literal code fragments that are ALL present exactly when the feature is (whitespace ignored), e.g.
    ``["tl.dot("]``. Plain substrings, never regular expressions, so that checking one can never hang. Empty: the
    feature cannot be checked statically and counts as unknown."""

    def key(self) -> str:
        return f"{self.locus}/{self.name}"


class Precondition(Frozen):
    """A condition under which the transformation is sound, with the reason (checked by the planner and coder)."""

    category: PreconditionCategory
    text: Line
    """The condition and why it matters, e.g. 'rows fit one block: the online max needs the whole row in one pass'."""


class Scope(Frozen):
    """Where a skill is expected to hold. Matching is exact or by '*'; architectures are never assumed supersets."""

    families: list[ShortName] = Field(default_factory=lambda: [ANY], min_length=1)
    languages: list[ShortName] = Field(default_factory=lambda: [ANY], min_length=1)
    archs: list[ShortName] = Field(default_factory=lambda: [ANY], min_length=1)


class SkillDraft(Frozen):
    """What the lifter model writes for one transformation; code checks it (``draft_contract_errors``)."""

    category: ShortName
    """The transformation's name, e.g. 'online_softmax' (one semantic transformation per skill)."""
    intent: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=300)]
    """One abstract sentence: what the optimisation achieves, no recipe."""
    anchor: ShortName
    """The semantic locus it edits, e.g. 'softmax.row_loop'."""
    recipe: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=4000)]
    """Actionable, code-bearing instructions; tuning choices (block sizes, warps, stages) go here."""
    before_snippet: Annotated[str, StringConstraints(max_length=2000)] = ""
    after_snippet: Annotated[str, StringConstraints(max_length=2000)] = ""
    preconditions: list[Precondition] = Field(min_length=1, max_length=8)
    requires: list[Feature] = Field(default_factory=list, max_length=8)
    """Features the code must already have (including hardware capabilities)."""
    provides: list[Feature] = Field(min_length=1, max_length=4)
    """Features the transformation adds. Present already means 'applied already': the skill is not offered again."""
    conflicts: list[Feature] = Field(default_factory=list, max_length=8)
    """Features that make the transformation unsound or pointless."""
    effects: list[Line] = Field(min_length=1, max_length=6)
    risks: list[Line] = Field(default_factory=list, max_length=8)
    """Failure modes its assumptions avoid, including failures seen while learning it."""


class SkillSource(StrEnum):
    SEARCH = "search"
    """Lifted from a parent -> child edge of a search that was significantly faster (paired)."""
    EXPERT = "expert"
    """Lifted from an accepted step of a backward walk over an expert kernel (``ksearch skills learn``)."""
    MANUAL = "manual"
    """Written by hand and imported."""


class Skill(SkillDraft):
    """A stored skill: the draft plus its scope and source. Its id is a hash of all of that (content-addressed)."""

    source: SkillSource
    scope: Scope

    @model_validator(mode="before")
    @classmethod
    def _drop_derived_id(cls, data: Any) -> Any:
        """A dumped skill carries its id; the id is recomputed from the content, never trusted from input."""
        if isinstance(data, dict) and "skill_id" in data:
            data = {k: v for k, v in data.items() if k != "skill_id"}
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def skill_id(self) -> str:
        content = self.model_dump(mode="json", exclude={"skill_id"})
        canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
        return "sk-" + hashlib.sha256(canonical.encode()).hexdigest()[:12]


def make_skill(draft: SkillDraft, *, source: SkillSource, scope: Scope) -> Skill:
    """Attach a scope and source to a draft. The scope comes from the context it was learned in: the model never
    widens it (KLineage overwrites the card's scope with the lineage's own)."""
    return Skill(**draft.model_dump(), source=source, scope=scope)


# --------------------------------------------------------------------------------------------------------------------
# Context: what a retrieval or a trial is about


class SkillContext(Frozen):
    """The hard-filter key of a run or of a learning session."""

    family: str
    language: str
    arch: str
    """'sm90', 'sm100', ... or 'cpu' (the Triton interpreter)."""


def task_family(task: str) -> str:
    """The family of a task name, for skill scopes.

    Built-in and plugin names are their own family (``softmax``, ``trimul``); ``flashinfer:DEF`` drops the
    definition's trailing shape tokens (``flashinfer:gqa_paged_decode`` for ``gqa_paged_decode_h32_kv4_d128_ps1``);
    KernelBench problems and operator files use the file's stem.
    """
    if task.startswith("flashinfer:"):
        words = task.removeprefix("flashinfer:").split("@", 1)[0].split("_")
        while len(words) > 1 and re.fullmatch(r"[a-z]+\d+", words[-1]):
            words.pop()
        return "flashinfer:" + "_".join(words)
    if task.startswith("kernelbench:"):
        rest = task.removeprefix("kernelbench:")
        stem = rest.rsplit("/", 1)[-1].removesuffix(".py")
        return "kernelbench:" + stem
    if task.endswith(".py") or "/" in task:
        return task.rsplit("/", 1)[-1].removesuffix(".py")
    return task


def arch_from_capability(capability: str | None) -> str:
    """'9.0' -> 'sm90', '10.0' -> 'sm100'; no capability (the CPU interpreter) -> 'cpu'."""
    if not capability:
        return "cpu"
    major, _, minor = capability.partition(".")
    return f"sm{major}{minor or '0'}"


def scope_matches(values: list[str], value: str) -> bool:
    return ANY in values or value in values
