"""An evaluation's evidence as text for the planner's and the coder's prompts. Pure: no I/O.

Per timed shape, in order of its weight in the score: the time, the roofline position, the difference to a
reference evaluation (marked when it is within noise) and the kernels of one profiled call, set against the TIMED
call (the profiled call's own wall time carries the profiler's overhead and is never shown: issue 57 found a "host
gap" of 0.39 ms that was the profiler's, not the kernel's). Then the compiled kernels' resources. Every shape is
shown: nothing of the evidence is cut by a character limit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ksearch.agent.counters_text import counters_text
from ksearch.contracts.evaluation import Evaluation, ShapeProfile, Timing

NOISE_FLOOR = 0.02
"""Relative differences below this are within noise whatever the samples say: separate processes on the same GPU
read the same kernel 1-3 % apart (bench/RESULTS.md, "Timing fidelity"), more on launch-bound shapes."""
NOISE_SIGMAS = 2.0
RESOURCE_LINES = 10
KERNEL_NAME_CHARS = 60
WEIGHT_STEP = 1.01
"""The relative change of one shape's time by which its weight in the score is measured."""

Score = Callable[[list[Timing]], tuple[float, float]]
"""A task's ``score``: timings -> (aggregate latency in ms, score, higher is better)."""

LEGEND = (
    "How to read the measurements: n = timed calls the statistic is taken from; +k not counted = calls timed and "
    "checked like the others but left out of the statistic because they ran next to a pause for an output check "
    "(the host and the device just back from idle read slower), so the statistic reads what an uninterrupted loop "
    "reads. kernels = the device time of each kernel in ONE profiled call after timing, its share of that call's "
    "kernel time, and all kernels' time as a share of the timed statistic (the rest of a timed call is launch "
    "overhead and host work between kernels). autotune kept = the config each @triton.autotune kernel chose at "
    "that shape, by Triton's benchmark before the timed calls."
)


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


def _aggregate_error(evaluation: Evaluation) -> float:
    """The relative standard error of a geometric mean over the shapes: (1/n) sqrt(sum of the shapes' squared)."""
    if not evaluation.timings:
        return 0.0
    return math.sqrt(sum(_relative_error(t) ** 2 for t in evaluation.timings)) / len(evaluation.timings)


@dataclass(frozen=True)
class Change:
    """How one evaluation's aggregate latency compares with another's."""

    speedup: float
    """old / new: above 1 the new one is faster."""
    within_noise: bool

    def describe(self, label: str) -> str:
        """``x0.98 vs parent (within noise)``."""
        verdict = "within noise" if self.within_noise else ("faster" if self.speedup > 1 else "slower")
        return f"x{self.speedup:.2f} vs {label} ({verdict})"


def aggregate_change(new: Evaluation, old: Evaluation) -> Change | None:
    """The change of the aggregate latency from ``old`` to ``new`` with its noise band: below ``NOISE_FLOOR`` or
    ``NOISE_SIGMAS`` combined standard errors (from each evaluation's per-shape spread) it is within noise. None when
    either has no latency."""
    if not new.latency_ms or not old.latency_ms:
        return None
    difference = abs(new.latency_ms - old.latency_ms) / old.latency_ms
    combined = math.hypot(_aggregate_error(new), _aggregate_error(old))
    noise = difference < max(NOISE_FLOOR, NOISE_SIGMAS * combined)
    return Change(speedup=old.latency_ms / new.latency_ms, within_noise=noise)


def parent_change(new: Evaluation, parent: Evaluation | None, parent_score: float | None) -> Change | None:
    """How a cycle's best compares with its parent's solution: by the two evaluations' latencies and spreads where
    the parent's evaluation is at hand, else by the scores against ``NOISE_FLOOR`` alone. None when either side has
    no figure."""
    if parent is not None:
        change = aggregate_change(new, parent)
        if change is not None:
            return change
    if new.score is None or parent_score is None or parent_score <= 0 or new.score <= 0:
        return None
    speedup = new.score / parent_score
    return Change(speedup=speedup, within_noise=abs(speedup - 1.0) < NOISE_FLOOR)


def versus(new: Timing, old: Timing | None, label: str) -> str:
    """'; base 1.2000 ms, x1.20 faster' or '...: within noise' (empty without a reference)."""
    if old is None or new.headline_ms <= 0:
        return ""
    speedup = old.headline_ms / new.headline_ms
    verdict = "within noise" if within_noise(new, old) else ("faster" if speedup > 1 else "slower")
    return f"; {label} {old.headline_ms:.4f} ms, x{speedup:.2f} ({verdict})"


def perf_text(latency_ms: float | None, score: float | None) -> str:
    """A result in milliseconds, the unit of every time in the prompts; the score beside it only where the task's
    score is not 1 / latency (a mean speedup over a baseline, say)."""
    if latency_ms is None:
        return "correct, not timed" if score is None else f"score {score:.4g} (higher is better)"
    text = f"{latency_ms:.4f} ms"
    if score is not None and not math.isclose(score * latency_ms, 1.0, rel_tol=1e-6):
        text += f" (the task's score {score:.4g}, higher is better)"
    return text


def score_weights(score: Score, timings: list[Timing]) -> dict[str, float]:
    """Each shape's weight in the score: the relative change of the score per relative change of that shape's time
    (1/n each for a geometric mean; a shape with a larger speedup weighs more in a mean of speedups). Measured with
    the task's own score function, so it holds for any score."""
    if len(timings) < 2:
        return {t.config: 1.0 for t in timings}
    base = score(timings)[1]
    weights = {}
    for i, t in enumerate(timings):
        slower = t.model_copy(update={"median_ms": t.median_ms * WEIGHT_STEP, "mean_ms": t.mean_ms * WEIGHT_STEP})
        changed = score([*timings[:i], slower, *timings[i + 1 :]])[1]
        weights[t.config] = math.log(base / changed) / math.log(WEIGHT_STEP)  # scores are positive
    return weights


def ranked(timings: list[Timing], weights: Mapping[str, float]) -> list[Timing]:
    """Shapes by weight in the score (heaviest first), then by time (longest first)."""
    return sorted(timings, key=lambda t: (-round(weights.get(t.config, 0.0), 3), -t.headline_ms, t.config))


def _weights_note(timings: list[Timing], weights: Mapping[str, float]) -> str:
    values = [weights.get(t.config, 0.0) for t in timings]
    if not values:
        return ""
    if max(values) - min(values) < 0.005:
        return (
            f"each of the {len(values)} shapes weighs 1/{len(values)} in the score (a 10 % cut of any one's time "
            f"raises the score by about {10 / len(values):.1f} %), longest first"
        )
    listed = ", ".join(f"{t.config.split('_')[0]} {weights.get(t.config, 0.0):.2f}" for t in ranked(timings, weights))
    return f"by weight in the score, heaviest first (a 10 % cut of a shape of weight w raises it by w x 10 %): {listed}"


def profile_line(profile: ShapeProfile, timed_ms: float | None) -> str:
    """The kernels of one profiled call on one line, their time set against the timed statistic of the shape."""
    busy = profile.kernel_ms
    if timed_ms:
        share = busy / timed_ms
        against = f", {share:.0%} of the timed {timed_ms:.4g} ms"
        if share > 1.0:
            against += " (one profiled call on fresh inputs runs colder than the timed repeats)"
    else:
        against = ""
    kernels = "; ".join(
        f"{k.name[:KERNEL_NAME_CHARS]} {k.time_ms:.4g} ms"
        + (f" x{k.launches}" if k.launches > 1 else "")
        + (f" ({k.time_ms / busy:.0%})" if busy > 0 else "")
        for k in profile.kernels
    )
    more = f"; {profile.other_kernels} more kernels" if profile.other_kernels else ""
    return f"kernels {busy:.4g} ms in {profile.launches} launches{against}: {kernels}{more}"


def timing_text(t: Timing) -> str:
    """One shape's timing for prompts: the statistic the score uses first, the other, spread, sample count (the
    calls left out of it counted as +k, which the prompt's legend explains)."""
    other = f"median {t.median_ms:.4f}" if t.headline == "mean" else f"mean {t.mean_ms:.4f}"
    left_out = f" (+{t.windows_left_out} not counted)" if t.windows_left_out else ""
    return (
        f"{t.config}: {t.headline} {t.headline_ms:.4f} ms ({other}), stdev {t.stdev_ms:.4f} ms, n={t.samples}{left_out}"
    )


def shape_lines(
    evaluation: Evaluation,
    reference: Evaluation | None = None,
    label: str = "base",
    weights: Mapping[str, float] | None = None,
) -> list[str]:
    """Every timed shape in order of weight: its timing, roofline position, difference to ``reference``, and the
    kernels of its profiled call on the line below."""
    points = {p.config: p for p in evaluation.roofline}
    profiles = {p.config: p for p in evaluation.profile}
    tuned: dict[str, list[str]] = {}
    for choice in evaluation.tuning:
        tuned.setdefault(choice.config, []).append(choice.describe())
    old = {t.config: t for t in reference.timings} if reference is not None else {}
    lines = []
    for t in ranked(evaluation.timings, weights or {}):
        point = points.get(t.config)
        roof = (
            f"; floor {point.floor_ms:.4g} ms ({point.bound}-bound), {point.fraction:.0%} of roofline"
            if point is not None
            else ""
        )
        lines.append(f"  {timing_text(t)}{roof}{versus(t, old.get(t.config), label)}")
        profile = profiles.get(t.config)
        if profile is not None:
            lines.append(f"    {profile_line(profile, t.headline_ms)}")
        if t.config in tuned:
            lines.append(f"    autotune kept: {'; '.join(tuned[t.config])}")
    return lines


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
    evaluation: Evaluation,
    reference: Evaluation | None = None,
    label: str = "base",
    *,
    score: Score | None = None,
    detail: bool = False,
) -> str:
    """Everything an evaluation tells the model beyond its verdict line, for prompts. ``score``: the task's score
    function, which orders the shapes by their weight in it (by time alone without it). ``detail``: for people, the
    full reason when there are no counters."""
    parts = []
    weights = score_weights(score, evaluation.timings) if score is not None else {}
    lines = shape_lines(evaluation, reference, label, weights)
    if lines:
        note = _weights_note(evaluation.timings, weights) if weights else ""
        parts.append(f"Per timed shape{', ' + note if note else ''}:\n" + "\n".join(lines))
    for text in (resources_text(evaluation), counters_text(evaluation.counters, detail=detail)):
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
