"""A skill's evidence log and what is derived from it: effect estimate, status, observed risks. Pure.

A skill is a hypothesis until a measurement says otherwise: its status and its effect estimate are *derived* from its
evidence log every time they are read, never stored as flags, so they cannot drift from the measurements.

Definitions used throughout (docs/skills.md repeats them):

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

import math
from enum import StrEnum
from typing import Any

from pydantic import Field

from ksearch.skills.records import Frozen, Skill


class EvidenceKind(StrEnum):
    ORIGIN = "origin"
    """The transition the skill was learned from (a search edge, or an expert walk step reversed)."""
    TRIAL = "trial"
    """An application of the skill by a search: the verification log."""


class Evidence(Frozen):
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


class Estimate(Frozen):
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


class SkillView(Frozen):
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
