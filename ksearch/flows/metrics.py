"""KernelBench's aggregate metrics, as pure functions over per-problem results.

A result is anything with ``correct`` (bool) and ``speedup`` (float or None: baseline latency / candidate latency)
as attributes or mapping keys. A problem whose search produced no correct kernel, or that failed to run, is a result
with ``correct=False``: it stays in the denominator.

- ``fast_p(results, p)`` = #(correct and speedup > p) / n over ALL problems (KernelBench's ``fastp``). fast_0 is the
  correctness rate; fast_1 the share that beats the baseline. A correct result whose speedup is unknown (the CPU
  interpreter times nothing) counts for p = 0 only, since any real speedup is > 0.
- ``geomean_speedup(results)``: geometric mean of the speedups of the correct results that have one (None if none).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

FAST_P_THRESHOLDS: tuple[float, ...] = (0.0, 1.0, 1.5, 2.0)
"""The thresholds a sweep reports (KernelBench's paper reports fast_0, fast_1 and fast_2)."""


def _get(result: Any, field: str) -> Any:
    if isinstance(result, Mapping):
        return result.get(field)
    return getattr(result, field, None)


def _speedup(result: Any) -> float | None:
    value = _get(result, "speedup")
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) and value > 0 else None


def fast_p(results: Iterable[Any], p: float) -> float:
    """Fraction of ALL results that are correct and faster than ``p`` times the baseline (0.0 for no results)."""
    rows = list(results)
    if not rows:
        return 0.0
    hits = 0
    for r in rows:
        if not _get(r, "correct"):
            continue
        s = _speedup(r)
        if (s is None and p <= 0) or (s is not None and s > p):
            hits += 1
    return hits / len(rows)


def geomean_speedup(results: Iterable[Any]) -> float | None:
    """Geometric mean speedup over the correct results with a measured speedup; None when there are none."""
    speeds = [s for r in results if _get(r, "correct") and (s := _speedup(r)) is not None]
    if not speeds:
        return None
    return math.exp(sum(math.log(s) for s in speeds) / len(speeds))


def summary(results: Iterable[Any], thresholds: Iterable[float] = FAST_P_THRESHOLDS) -> dict[str, Any]:
    """{"n", "correct", "fast_p": {"0": ..., "1": ..., "1.5": ..., "2": ...}, "geomean_speedup"} for reports."""
    rows = list(results)
    return {
        "n": len(rows),
        "correct": sum(1 for r in rows if _get(r, "correct")),
        "fast_p": {f"{p:g}": fast_p(rows, p) for p in thresholds},
        "geomean_speedup": geomean_speedup(rows),
    }


__all__ = ["FAST_P_THRESHOLDS", "fast_p", "geomean_speedup", "summary"]
