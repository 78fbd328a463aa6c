"""Verified optimisation skills (after KLineage, arXiv 2605.28213): typed records and the rules derived from them.

A *skill* is one semantic code transformation (never a parameter sweep: tile sizes and warp counts belong in its
recipe) with what it is for (intent), where it applies (anchor), how to do it (recipe), when it is sound (typed
preconditions, required and conflicting code features, scope) and what it did (effects, risks, evidence). A skill is
a hypothesis until a measurement says otherwise: its status and its effect estimate are *derived* from its evidence
log every time they are read, never stored as flags, so they cannot drift from the measurements.

Everything here is pure: no I/O, deterministic. Storage is ``ksearch.store.skills``; retrieval and prompt text are
``ksearch.agent.skill_retrieval``.

Definitions used throughout (README "Skills" repeats them):

- **held out**: a trial on a different task than every origin of the skill, or on the same task but applied to code
  the skill was not learned from (neither the before nor the after version of any origin). A replay of the source
  run applies the skill to the same code, so it is not held out.
- **verified**: a trial whose candidate passed, was timed, and whose paired, interleaved re-measurement against the
  code it was applied to shows a significant speedup (the 95 % interval of ``base / candidate`` lies above 1).
- **admitted**: at least one held-out, verified trial. On the CPU nothing is timed, so CPU trials never admit.
- **retired**: at least 5 trials and either a posterior pass rate below 0.3, or at least 3 paired measurements whose
  90 % upper bound of the speedup is below 1. Retirement wins over admission; retired skills are never retrieved.
"""

from __future__ import annotations

import hashlib
import json
import math
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
    "sm100": frozenset({"tensor_cores", "fp16", "bf16", "tf32", "cp_async", "fp8", "fp4", "tma", "clusters", "tcgen05"}),
}
"""What each architecture offers, by name. Deliberately no implicit supersets: sm100 has no ``wgmma``."""

PreconditionCategory = Literal["data_types", "layout", "storage", "pipeline", "hardware", "other"]
"""KLineage's five categories of preconditions, plus 'other'."""

Line = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=600)]
ShortName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=80)]
DetectString = Annotated[str, StringConstraints(min_length=1, max_length=120)]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Feature(_Frozen):
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


class Precondition(_Frozen):
    """A condition under which the transformation is sound, with the reason (checked by the planner and coder)."""

    category: PreconditionCategory
    text: Line
    """The condition and why it matters, e.g. 'rows fit one block: the online max needs the whole row in one pass'."""


class Scope(_Frozen):
    """Where a skill is expected to hold. Matching is exact or by '*'; architectures are never assumed supersets."""

    families: list[ShortName] = Field(default_factory=lambda: [ANY], min_length=1)
    languages: list[ShortName] = Field(default_factory=lambda: [ANY], min_length=1)
    archs: list[ShortName] = Field(default_factory=lambda: [ANY], min_length=1)


class SkillDraft(_Frozen):
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


class SkillContext(_Frozen):
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


# --------------------------------------------------------------------------------------------------------------------
# Static feature checks


def _squash(text: str) -> str:
    return "".join(text.split())


def feature_present(feature: Feature, code: str | None, arch: str) -> bool | None:
    """True / False when the code (or the architecture, for hardware features) tells; None when it cannot."""
    if feature.locus == HARDWARE_LOCUS:
        capabilities = HARDWARE_CAPABILITIES.get(arch)
        return None if capabilities is None else feature.name in capabilities
    if code is None or not feature.detect:
        return None
    squashed = _squash(code)
    return all(_squash(fragment) in squashed for fragment in feature.detect)


def precondition_problems(skill: SkillDraft, code: str | None, arch: str) -> list[str]:
    """Why the typed part of the skill does not fit ``code`` on ``arch`` (empty: it fits, or cannot be told)."""
    problems = []
    for feature in skill.requires:
        if feature_present(feature, code, arch) is False:
            where = "the architecture" if feature.locus == HARDWARE_LOCUS else "the code"
            problems.append(f"requires {feature.key()}, which {where} ({arch}) lacks")
    for feature in skill.conflicts:
        if feature_present(feature, code, arch) is True:
            problems.append(f"conflicts with {feature.key()}, which the code already has")
    for feature in skill.provides:
        if feature_present(feature, code, arch) is True:
            problems.append(f"already applied: the code already has {feature.key()}")
    return problems


def draft_contract_errors(draft: SkillDraft, before_code: str, after_code: str, arch: str) -> list[str]:
    """KLineage's contract checks, done statically on the two versions of the code.

    Each ``provides`` feature that can be detected must be absent before and present after, and at least one must be
    detectable (so a retrieval can tell when the skill is applied already); detectable ``requires`` must hold before
    and detectable ``conflicts`` must not. Hardware features must exist on ``arch`` (when the arch is known).
    """
    errors = []
    if not any(f.detect for f in draft.provides if f.locus != HARDWARE_LOCUS):
        errors.append("provides: give at least one feature 'detect' strings (code fragments present only after)")
    for i, feature in enumerate(draft.provides):
        if feature.locus == HARDWARE_LOCUS:
            errors.append(f"provides[{i}]: a transformation cannot provide a hardware capability")
            continue
        if feature.detect:
            if feature_present(feature, after_code, arch) is False:
                errors.append(f"provides[{i}] {feature.key()}: detect strings {feature.detect} are not all in the after code")
            if feature_present(feature, before_code, arch) is True:
                errors.append(f"provides[{i}] {feature.key()}: detect strings {feature.detect} are already in the before code")
    for i, feature in enumerate(draft.requires):
        if feature_present(feature, before_code, arch) is False:
            errors.append(f"requires[{i}] {feature.key()}: not present in the before code (or not on {arch})")
    for i, feature in enumerate(draft.conflicts):
        if feature_present(feature, before_code, arch) is True:
            errors.append(f"conflicts[{i}] {feature.key()}: present in the before code, where the step was sound")
    return errors


# --------------------------------------------------------------------------------------------------------------------
# Evidence and what is derived from it


class EvidenceKind(StrEnum):
    ORIGIN = "origin"
    """The transition the skill was learned from (a search edge, or an expert walk step reversed)."""
    TRIAL = "trial"
    """An application of the skill by a search: the verification log."""


class Evidence(_Frozen):
    """One measured transition: where the skill came from, or one application of it."""

    kind: EvidenceKind
    run_id: str
    """The run (or the learning session) that measured it."""
    cycle_id: str
    """The cycle, or the walk step ('step3')."""
    node_id: str | None = None
    task: str
    family: str
    language: str
    arch: str
    base_candidate_id: str | None = None
    """The code the transformation started from (trial: the parent's solution; origin: the before version)."""
    candidate_id: str | None = None
    """The code it produced (trial: the cycle's best, or its last attempt if nothing passed; origin: after)."""
    verdict: str
    """The evaluator's verdict for ``candidate_id`` ('passed', 'incorrect', ...), or 'no_code'."""
    timed: bool = False
    speedup: float | None = Field(default=None, gt=0)
    """Paired, interleaved re-measurement: base latency / candidate latency (above 1: the skill made it faster)."""
    ci_low: float | None = Field(default=None, gt=0)
    ci_high: float | None = Field(default=None, gt=0)
    held_out: bool = False
    """Computed when recorded (see the module docstring); always False for origins."""
    note: str = ""
    imported: bool = False
    """Came in through ``ksearch skills import`` (measured in another workspace)."""

    @property
    def passed(self) -> bool:
        return self.verdict == "passed"

    @property
    def paired(self) -> bool:
        return self.speedup is not None and self.ci_low is not None and self.ci_high is not None

    @property
    def verified(self) -> bool:
        """Passed, timed, and significantly faster than the code it was applied to (paired 95 % CI above 1)."""
        return self.passed and self.timed and self.paired and (self.ci_low or 0.0) > 1.0


def is_held_out(task: str, base_candidate_id: str | None, origins: list[Evidence]) -> bool:
    """A different task than every origin, or the same task applied to code the skill was not learned from."""
    if not origins:
        return True  # a hand-written skill has no source: every application is held out
    if task not in {o.task for o in origins}:
        return True
    learned_on = {o.base_candidate_id for o in origins} | {o.candidate_id for o in origins}
    return base_candidate_id is None or base_candidate_id not in learned_on


class SkillStatus(StrEnum):
    CANDIDATE = "candidate"
    """Not yet verified on held-out code: shown to the planner as unverified."""
    ADMITTED = "admitted"
    """At least one held-out trial verified it."""
    RETIRED = "retired"
    """The evidence says it does not pay off (or breaks code): kept for its risks, never retrieved."""


PRIOR_SHRINK = 0.5
"""Source gains overstate transfer (KLineage: 'source gains guide search; they do not predict target speedup'): the
prior mean of the log speedup is half the mean log gain of the skill's origins."""
PRIOR_SIGMA = 0.3
"""Prior standard deviation of the log speedup (about +-35 %)."""
MIN_SIGMA = 0.005
"""Floor on a measurement's standard error, so one very tight interval cannot dominate forever."""
Z90 = 1.6449
Z95 = 1.96


class Estimate(_Frozen):
    """What the evidence says about a skill's effect. Speedups are base / result (above 1 is faster)."""

    trials: int = 0
    trials_passed: int = 0
    paired_trials: int = 0
    held_out_verified: int = 0
    pass_rate: float = 0.5
    """Posterior mean of P(a trial passes), Beta(1, 1) prior."""
    source_speedup: float | None = None
    """Geometric mean of the origins' paired speedups (None when none was timed, e.g. learned on the CPU)."""
    speedup: float | None = None
    """exp of the posterior mean log speedup: a prior from the source, updated by every paired trial."""
    low: float | None = None
    high: float | None = None
    """90 % interval of the speedup."""


def _log_se(ev: Evidence) -> float:
    assert ev.ci_low is not None and ev.ci_high is not None
    return max(MIN_SIGMA, (math.log(ev.ci_high) - math.log(ev.ci_low)) / (2 * Z95))


def _unique(evidence: list[Evidence]) -> list[Evidence]:
    """One entry per (kind, base, candidate, arch): a replay re-measuring the same pair does not count twice."""
    seen: dict[tuple[str, str | None, str | None, str], Evidence] = {}
    for ev in evidence:
        key = (ev.kind.value, ev.base_candidate_id, ev.candidate_id, ev.arch)
        if ev.base_candidate_id is None and ev.candidate_id is None:
            key = (ev.kind.value, ev.run_id, ev.cycle_id, ev.arch)
        seen.setdefault(key, ev)
    return list(seen.values())


def estimate(evidence: list[Evidence]) -> Estimate:
    """Pass rate (Beta) and a normal posterior on the log speedup from paired measurements (each with its own
    standard error from its confidence interval); failed trials only lower the pass rate."""
    unique = _unique(evidence)
    origins = [e for e in unique if e.kind == EvidenceKind.ORIGIN]
    trials = [e for e in unique if e.kind == EvidenceKind.TRIAL]
    passed = [t for t in trials if t.passed]
    paired = [t for t in passed if t.timed and t.paired]
    source = [o for o in origins if o.timed and o.paired]
    source_log = sum(math.log(o.speedup or 1.0) for o in source) / len(source) if source else None
    out: dict[str, Any] = {
        "trials": len(trials),
        "trials_passed": len(passed),
        "paired_trials": len(paired),
        "held_out_verified": sum(1 for t in trials if t.held_out and t.verified),
        "pass_rate": (1 + len(passed)) / (2 + len(trials)),
        "source_speedup": math.exp(source_log) if source_log is not None else None,
    }
    if source_log is None and not paired:
        return Estimate(**out)
    precision = 1 / PRIOR_SIGMA**2
    weighted = PRIOR_SHRINK * (source_log or 0.0) * precision
    for t in paired:
        w = 1 / _log_se(t) ** 2
        precision += w
        weighted += math.log(t.speedup or 1.0) * w
    mean, sd = weighted / precision, 1 / math.sqrt(precision)
    return Estimate(**out, speedup=math.exp(mean), low=math.exp(mean - Z90 * sd), high=math.exp(mean + Z90 * sd))


def derive_status(evidence: list[Evidence], est: Estimate | None = None) -> SkillStatus:
    """candidate / admitted / retired from the evidence (see the module docstring for the exact rules)."""
    est = est or estimate(evidence)
    if est.trials >= 5:
        if est.pass_rate < 0.3:
            return SkillStatus.RETIRED
        if est.paired_trials >= 3 and est.high is not None and est.high < 1.0:
            return SkillStatus.RETIRED
    if est.held_out_verified > 0:
        return SkillStatus.ADMITTED
    return SkillStatus.CANDIDATE


def observed_risks(evidence: list[Evidence], limit: int = 4) -> list[str]:
    """Risks learned from failed or slower trials (newest last), added to the skill's own risks when shown."""
    out = []
    for ev in evidence:
        if ev.kind != EvidenceKind.TRIAL:
            continue
        if not ev.passed:
            detail = f": {ev.note}" if ev.note else ""
            out.append(f"observed {ev.verdict} on {ev.task} ({ev.arch}), run {ev.run_id} cycle {ev.cycle_id}{detail}")
        elif ev.paired and (ev.ci_high or 2.0) < 1.0:
            out.append(
                f"observed slower on {ev.task} ({ev.arch}): x{ev.speedup:.3f} [{ev.ci_low:.3f}, {ev.ci_high:.3f}], "
                f"run {ev.run_id} cycle {ev.cycle_id}"
            )
    return out[-limit:]


class SkillView(_Frozen):
    """A skill with everything derived from its evidence at one moment: what list/show print and snapshots freeze."""

    skill: Skill
    status: SkillStatus
    estimate: Estimate
    observed_risks: list[str] = Field(default_factory=list)
    evidence: int = 0
    """How many evidence records it had."""

    @property
    def skill_id(self) -> str:
        return self.skill.skill_id

    @property
    def risks(self) -> list[str]:
        return [*self.skill.risks, *self.observed_risks]


def summarize(skill: Skill, evidence: list[Evidence]) -> SkillView:
    est = estimate(evidence)
    return SkillView(
        skill=skill,
        status=derive_status(evidence, est),
        estimate=est,
        observed_risks=observed_risks(evidence),
        evidence=len(evidence),
    )


# --------------------------------------------------------------------------------------------------------------------
# Snapshots and the exchange format


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
