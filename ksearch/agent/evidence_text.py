"""An evaluation's evidence as bounded text for the planner's and the coder's prompts: per timed shape the time, the
roofline position and the difference to a reference evaluation (marked when it is within noise), then the per-kernel
profile of one call and the compiled kernels' resources. Pure: no I/O.
"""

from __future__ import annotations

import math

from ksearch.agent.counters_text import counters_text
from ksearch.contracts.evaluation import Evaluation, Timing

NOISE_FLOOR = 0.02
"""Relative differences below this are within noise whatever the samples say: separate processes on the same GPU
read the same kernel 1-3 % apart (bench/RESULTS.md, "Timing fidelity"), more on launch-bound shapes."""
NOISE_SIGMAS = 2.0
PROFILE_TEXT_LIMIT = 1800
RESOURCE_LINES = 8


def _relative_error(t: Timing) -> float:
    if t.samples <= 0 or t.headline_ms <= 0:
        return 0.0
    return t.stdev_ms / math.sqrt(t.samples) / t.headline_ms


def within_noise(new: Timing, old: Timing) -> bool:
    """Whether two timings of a shape are too close to tell apart: the relative difference is below ``NOISE_FLOOR``
    or ``NOISE_SIGMAS`` combined standard errors of the means."""
    if old.headline_ms <= 0:
        return False
    difference = abs(new.headline_ms - old.headline_ms) / old.headline_ms
    combined = math.hypot(_relative_error(new), _relative_error(old))
    return difference < max(NOISE_FLOOR, NOISE_SIGMAS * combined)


def versus(new: Timing, old: Timing | None, label: str) -> str:
    """'; base 1.2000 ms, x1.20 faster' or '...: within noise' (empty without a reference)."""
    if old is None or new.headline_ms <= 0:
        return ""
    speedup = old.headline_ms / new.headline_ms
    verdict = "within noise" if within_noise(new, old) else ("faster" if speedup > 1 else "slower")
    return f"; {label} {old.headline_ms:.4f} ms, x{speedup:.2f} ({verdict})"


def shape_lines(evaluation: Evaluation, reference: Evaluation | None = None, label: str = "base") -> list[str]:
    """One line per timed shape: its timing, its roofline position and the difference to ``reference``."""
    points = {p.config: p for p in evaluation.roofline}
    old = {t.config: t for t in reference.timings} if reference is not None else {}
    lines = []
    for t in evaluation.timings:
        point = points.get(t.config)
        roof = (
            f"; floor {point.floor_ms:.4g} ms ({point.bound}-bound), {point.fraction:.0%} of roofline"
            if point is not None
            else ""
        )
        lines.append(f"  {t.describe()}{roof}{versus(t, old.get(t.config), label)}")
    return lines


def profile_text(evaluation: Evaluation, limit: int = PROFILE_TEXT_LIMIT) -> str:
    """The per-kernel profile of one call per timed shape, clipped to ``limit`` characters ('' when none)."""
    if not evaluation.profile:
        return ""
    blocks = [p.describe() for p in evaluation.profile]
    text = "Profile of one call per timed shape (after timing; kernel device time and share of the call):\n"
    for block in blocks:
        if len(text) + len(block) + 1 > limit:
            text += f"  ... {len(blocks) - blocks.index(block)} more shapes not shown\n"
            break
        text += "  " + block.replace("\n", "\n  ") + "\n"
    return text.rstrip()


def resources_text(evaluation: Evaluation, limit: int = RESOURCE_LINES) -> str:
    """The compiled kernels' figures, at most ``limit`` lines ('' when none were recorded)."""
    if not evaluation.resources:
        return ""
    where = evaluation.environment.get("target_gpu") or evaluation.device
    lines = [f"Compiled kernels (for {where}):"]
    lines += [f"  {r.describe()}" for r in evaluation.resources[:limit]]
    if len(evaluation.resources) > limit:
        lines.append(f"  ... {len(evaluation.resources) - limit} more")
    return "\n".join(lines)


def evidence_text(
    evaluation: Evaluation, reference: Evaluation | None = None, label: str = "base", *, detail: bool = False
) -> str:
    """Everything an evaluation tells the model beyond its verdict line, for prompts (``detail``: for people, the
    full reason when there are no counters)."""
    parts = []
    lines = shape_lines(evaluation, reference, label)
    if lines:
        parts.append("Per timed shape:\n" + "\n".join(lines))
    counters = counters_text(evaluation.counters, detail=detail)
    for text in (profile_text(evaluation), resources_text(evaluation), counters):
        if text:
            parts.append(text)
    return "\n".join(parts)


def roofline_summary(evaluation: Evaluation) -> str:
    """One line: the mean fraction of roofline and the bound of each shape ('' without roofline points)."""
    if not evaluation.roofline:
        return ""
    mean = sum(p.fraction for p in evaluation.roofline) / len(evaluation.roofline)
    shapes = ", ".join(f"{p.config} {p.fraction:.0%} ({p.bound})" for p in evaluation.roofline)
    return f"roofline: mean {mean:.0%} of roofline; per shape {shapes}"
