"""Pure statistics of timing samples: stop rules, summaries and paired confidence intervals (no device, no I/O)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field


# -- pure statistics and stop rules -------------------------------------------------------------------------------
def relative_standard_error(samples: list[float]) -> float:
    """stdev / sqrt(n) / mean (sample stdev, n - 1), inf with fewer than 2 samples or a non-positive mean. Plain float
    arithmetic: ``statistics.stdev`` works in exact fractions and costs ten times as much, in loops that call this
    between timed calls."""
    runs = len(samples)
    if runs < 2:
        return math.inf
    mean = math.fsum(samples) / runs
    if mean <= 0:
        return math.inf
    variance = math.fsum((x - mean) ** 2 for x in samples) / (runs - 1)
    return math.sqrt(variance / runs) / mean


def robust_should_stop(
    samples: list[float],
    elapsed_s: float,
    *,
    min_samples: int = 10,
    target_rel_se: float = 0.01,
    time_cap_s: float = 2.0,
    max_samples: int = 5000,
) -> bool:
    """Stop once ``min_samples`` are taken and the relative SE is below target or the time cap is hit."""
    if len(samples) >= max_samples:
        return True
    if len(samples) < min_samples:
        return False
    return relative_standard_error(samples) < target_rel_se or elapsed_s > time_cap_s


def gpumode_should_stop(
    samples: list[float],
    wall_s: float,
    *,
    max_time_s: float = 30.0,
    max_wall_s: float = 120.0,
    max_repeats: int = 100,
    target_rel_err: float = 0.001,
) -> bool:
    """GPU MODE's rule: at most ``max_repeats``; after >= 3 runs stop when std_err/mean < 0.001, or the summed kernel
    time (mean * runs) exceeds ``max_time_s``, or the wall time exceeds ``max_wall_s``. Samples in ms.

    Computed as upstream's ``calculate_stats`` computes it after every repeat (a sum, then a two-pass variance over the
    list in floats), so that the host does between two timed calls what upstream's does: the same decisions, at the
    same cost. ``statistics.stdev`` (exact fractions) took ten times as long, and that work between repeats read in
    the timed calls of launch-bound shapes: TriMul's 0.3 ms shape +6 % in the same process, +12 % across processes
    against upstream's loop, geomean +3.6 % (bench/RESULTS.md, "Timing fidelity")."""
    runs = len(samples)
    if runs >= max_repeats:
        return True
    if runs < 3:
        return False
    mean = sum(samples) / runs
    variance = sum(map(lambda x: (x - mean) ** 2, samples))  # noqa: C417 - upstream's form, kept for its cost
    err = math.sqrt(variance / (runs - 1)) / math.sqrt(runs)
    return (mean > 0 and err / mean < target_rel_err) or mean * runs / 1000.0 > max_time_s or wall_s > max_wall_s


SCORED_MIN_WINDOWS = 3
SCORED_MIN_SHARE = 0.5
"""A ``gpumode-benchmark`` score leaves out the windows an audit disturbed only while at least this share of a
config's windows (and ``SCORED_MIN_WINDOWS``) remain; else it counts every window (``ledger.scored_samples``)."""


@dataclass
class UndisturbedSamples:
    """GPU MODE's stop rule in a loop that audits (``gpumode-benchmark``), on the repeats no audit disturbed. An
    audited repeat (re-randomised just before, the checker's answer awaited after) and the repeat right after its gap
    read slower than the loop's others (0.1-0.2 ms on TriMul on an H200), so the score leaves them out
    (``ledger.scored_samples``); counted by the stop rule they kept b6's loops going to 29, 44, 48 and 62 repeats where
    this rule stops after 10, 26, 41 and 51 (the ledgers of 2026-11-30, replayed). So the rule's precision
    test reads the repeats upstream's uninterrupted loop would have, and only once the score will read them too (the
    loop's last repeat is audited, so the score leaves it out as well); its caps (repeats, kernel time, wall time) count
    every repeat, as upstream's. The worker's loop and the parent's replay of it both keep one of these."""

    kept: list[float] = field(default_factory=list)
    disturbed: int = 0
    total_ms: float = 0.0
    _after_audit: bool = False
    _last_kept: bool = False

    def add(self, sample: float, audited: bool) -> None:
        self.total_ms += sample
        self._last_kept = not (audited or self._after_audit)
        if self._last_kept:
            self.kept.append(sample)
        else:
            self.disturbed += 1
        self._after_audit = audited

    def should_stop(self, wall_s: float, *, max_time_s: float, max_wall_s: float, max_repeats: int) -> bool:
        """``gpumode_should_stop`` with its precision test on the undisturbed repeats, once enough of them would be
        scored were the loop to stop now."""
        runs = len(self.kept) + self.disturbed
        if runs >= max_repeats:
            return True
        if runs < 3:
            return False
        if self.total_ms / 1000.0 > max_time_s or wall_s > max_wall_s:
            return True
        scored = len(self.kept) - self._last_kept  # the last repeat is audited: the score leaves it out
        if scored < max(SCORED_MIN_WINDOWS, SCORED_MIN_SHARE * runs):
            return False
        return gpumode_should_stop(self.kept, 0.0, max_time_s=math.inf, max_wall_s=math.inf, max_repeats=runs + 1)


def summarize(samples: list[float]) -> dict[str, float | int]:
    """median, mean, stdev (sample) and count of samples in ms."""
    if not samples:
        raise ValueError("no samples")
    return {
        "median_ms": statistics.median(samples),
        "mean_ms": statistics.fmean(samples),
        "stdev_ms": statistics.stdev(samples) if len(samples) > 1 else 0.0,
        "samples": len(samples),
    }


_T975 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    11: 2.201,
    12: 2.179,
    13: 2.160,
    14: 2.145,
    15: 2.131,
    16: 2.120,
    17: 2.110,
    18: 2.101,
    19: 2.093,
    20: 2.086,
    25: 2.060,
    30: 2.042,
    40: 2.021,
    60: 2.000,
    120: 1.980,
}


def t_quantile_975(df: int) -> float:
    """Two-sided 95 % Student t critical value (table, rounded down to the nearest tabulated df)."""
    if df < 1:
        return math.inf
    best = max(k for k in _T975 if k <= df)
    return _T975[best] if df <= 120 else 1.960


def mean_ci(values: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): a 95 % t-interval for the mean; a single value gives an infinite interval."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, -math.inf, math.inf
    half = t_quantile_975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half
