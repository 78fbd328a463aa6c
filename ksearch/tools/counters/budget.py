"""How much the counters may cost, and on what: pure rules the search and ``ksearch eval --counters`` share.

Counters are collected once per cycle (its best attempt) and for the few solutions the planner names, on the
``shapes`` benchmark shapes that take the longest (under a geometric-mean score every shape's relative gain counts
alike; the longest are where the kernels' own behaviour, not launch overhead, sets the time), with a cap on the
kernel launches profiled. A run keeps their total under ``SHARE`` of the GPU time its evaluations took: a collection
that would start above it is skipped, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from ksearch.contracts.evaluation import Timing

SHARE = 0.15
"""Counters may take at most this share of the GPU time a run's evaluations took (checked before each collection)."""
SHAPES = 2
"""Benchmark shapes profiled per collection (the longest)."""
LAUNCHES_PER_SHAPE = 16
"""Kernel launches profiled per shape at most (a call that launches more is cut, and the report says so)."""
TIMEOUT_S = 240.0
"""ncu and the candidate are killed after this long (the report's status says ``timeout``)."""
PER_SHAPE_TIMEOUT_S = 60.0


def choose_shapes(timings: list[Timing], count: int = SHAPES) -> list[str]:
    """The ``count`` benchmark shapes with the longest headline time, longest first."""
    ranked = sorted(timings, key=lambda t: (-t.headline_ms, t.config))
    return [t.config for t in ranked[: max(0, count)]]


def launch_cap(shapes: int, per_shape: int = LAUNCHES_PER_SHAPE) -> int:
    return max(1, shapes) * per_shape


def timeout_s(shapes: int) -> float:
    """The time a collection may take: ncu's start and the candidate's compile, then each shape's replayed call."""
    return min(TIMEOUT_S, 120.0 + PER_SHAPE_TIMEOUT_S * max(1, shapes))


@dataclass(frozen=True)
class Spend:
    """GPU seconds a run has spent so far on evaluations and on counters."""

    evaluations_s: float
    counters_s: float

    def allows(self, share: float = SHARE) -> bool:
        """Whether another collection may start: the counters so far are under ``share`` of the evaluations' time
        (the first one always may: nothing to weigh it against yet but its own cost, which the bench states)."""
        if self.counters_s <= 0:
            return True
        return self.counters_s < share * self.evaluations_s

    def describe(self, share: float = SHARE) -> str:
        return (
            f"counters have taken {self.counters_s:.0f} s against {self.evaluations_s:.0f} s of evaluations; the run "
            f"keeps them under {share:.0%}"
        )
