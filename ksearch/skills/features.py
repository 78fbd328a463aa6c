"""Static feature checks: whether a skill's typed features hold for a piece of code on an architecture. Pure.

Features are checked by plain substrings (never regular expressions, so a check can never hang); hardware features
against ``HARDWARE_CAPABILITIES``.
"""

from __future__ import annotations

from ksearch.skills.records import HARDWARE_CAPABILITIES, HARDWARE_LOCUS, Feature, SkillDraft


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
                errors.append(
                    f"provides[{i}] {feature.key()}: detect strings {feature.detect} are not all in the after code"
                )
            if feature_present(feature, before_code, arch) is True:
                errors.append(
                    f"provides[{i}] {feature.key()}: detect strings {feature.detect} are already in the before code"
                )
    for i, feature in enumerate(draft.requires):
        if feature_present(feature, before_code, arch) is False:
            errors.append(f"requires[{i}] {feature.key()}: not present in the before code (or not on {arch})")
    for i, feature in enumerate(draft.conflicts):
        if feature_present(feature, before_code, arch) is True:
            errors.append(f"conflicts[{i}] {feature.key()}: present in the before code, where the step was sound")
    return errors
