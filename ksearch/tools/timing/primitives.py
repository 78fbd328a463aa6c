"""The primitives every timing method is written against: the worker's side (``TimingRunner``: calls, events,
windows, audits), where a loop re-randomises inputs and audits (``FreshPlan``), and the method base class. The loops
themselves, and the methodology they hold, are in ``ksearch.tools.timing.methods``."""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Protocol

from ksearch.errors import UserError

SEED_STRIDE = 13
"""Input set ``i`` of a config uses seed ``base + 13 * i`` (GPU MODE's ``seed += 13``), for every method."""
MAX_INPUT_SETS = 100_000
"""Upper bound on input-set indices; the checker refuses any other seed."""


class TimingError(UserError, ValueError):
    """A timing method that does not exist or that the task does not support."""


class Event(Protocol): ...


class Call(Protocol):
    """One prepared call of the candidate on one input set: ``call()`` runs ``fn(*args)`` and returns its output."""

    index: int

    def __call__(self) -> Any: ...


class TimingRunner(Protocol):
    """What a timing method needs from the worker. Every call is the candidate's, guarded by the worker."""

    def call_on(self, index: int, *, fresh: bool = False, reuse_args: bool = True, clone: bool = False) -> Call:
        """A call on input set ``index`` (seed ``base + 13 * index``). Its inputs are generated on first use and
        cached, or generated anew and not cached (``fresh``), or cloned from the cached set (``clone``). The argument
        object is the set's own, built once and reused by every call (``reuse_args``), or a new one."""

    def prime(self, call: Call) -> None:
        """Before a call: poison its destination buffers (tasks that pass outputs as arguments)."""

    def sets_that_fit(self, wanted: int) -> int:
        """How many of ``wanted`` input sets a loop may keep for rotation: on a GPU those that take at most a quarter
        of its memory together (at least one), all of them elsewhere."""

    def event(self) -> Event: ...

    def record(self, event: Event) -> None: ...

    def elapsed(self, start: Event, end: Event) -> float:
        """Milliseconds between two recorded events (through the harness's own reference to ``elapsed_time``)."""

    def synchronize(self) -> None:
        """Device-wide synchronize."""

    def open_window(self) -> None:
        """A timed window begins: the parent stamps it on its own clock (``ksearch.tools.evaluator.parent.ledger``)."""

    def close_window(self, events: list[tuple[Event, Event]]) -> list[float]:
        """Device-wide synchronize, then the window's samples (ms per event pair), sent to the parent as they are."""

    def null_window(self) -> None:
        """The harness's own window around no call (go, two events, synchronize, timed), marked as such for the
        parent: the reference it holds the timed windows of the loop to (``ledger_rules.NULL_MARGIN_MS``). Runners
        without a parent do nothing."""

    def flush(self) -> None:
        """Evict the L2 cache (a 256 MB write on the device)."""

    def hold(self, ms: float) -> None:
        """Keep the device busy for about ``ms`` milliseconds (a spin kernel; nothing on the CPU), so that the calls
        enqueued behind it run back to back on the device however slowly the host issues them."""

    def wall(self) -> float:
        """Seconds on a monotonic clock (the harness's own reference, not the candidate's)."""

    def after(self, call: Call, output: Any) -> None:
        """Right after a call returned, on the host only (no device work): harness guard and output form."""

    def glance(self, call: Call, output: Any) -> None:
        """The cheapest host-only look at an output (its exact type); ``after`` when anything is unusual."""

    def stage(self, call: Call, output: Any) -> Any:
        """A stream-ordered copy of a timed call's output for the checker, enqueued right after its end event (no
        sync): what ``audit`` compares the output with after the synchronisation (deferred work)."""

    def audit(self, call: Call, output: Any, staged: Any = None) -> None:
        """A timed call's output to the checker: staged in stream order (unless ``staged``), then synchronize,
        deferred-work check, inputs unchanged, and the checker's verdict (raises when it fails). A call on an input
        set whose activations were re-randomised is judged on those values."""

    def fresh_values(self, call: Call) -> Any:
        """New activation values for ``call``'s input set (generated now, applied by ``rerandomise``), or None when
        the task declares no inputs that may be re-randomised in place."""

    def rerandomise(self, call: Call, values: Any) -> None:
        """Copy ``values`` into the activation inputs of ``call``'s set in place (stream-ordered, no sync), so the
        next call on the set, through the same argument object, computes on values no call has seen."""

    def want_audit(self, index: int) -> bool:
        """Whether the output of the block that just ended is to be checked (a random sample, at least once per
        input set)."""


AUDIT_RATE = 0.0625
"""The chance that each repeat after a loop's first audit is re-randomised and audited (``FreshPlan.rate``): about 8
audits per loop of 100 repeats. Each costs the checker's and the worker's making of the inputs and a sampled reference
(6-11 ms of TriMul's verdict on an H200), the verdict time's main cost beyond upstream's. 1 in 16 puts a live TriMul
verdict level with the code before the trusted timing (1 in 8 read 1.08-1.18x; bench/RESULTS.md, "Audits on
re-randomised inputs"); a kernel replaying on a random half of its calls then escapes one loop with a chance of 1.2e-2
and is still met by the leaderboard-mode confirmation of every new best. ``KSEARCH_AUDIT_RATE`` chooses another."""


@dataclass
class FreshPlan:
    """Where a loop re-randomises its inputs before a call and audits that call: one position among the first
    ``first_within`` (so even the shortest loop has one), then each later one with probability ``rate``; the loop
    does not stop before ``minimum`` such audits. Drawn from ``SystemRandom``: the candidate cannot predict them."""

    minimum: int = 2
    first_within: int = 3
    rate: float = AUDIT_RATE
    rng: random.Random = field(default_factory=random.SystemRandom)
    done: int = 0
    _first: int | None = None

    def wants(self, position: int) -> bool:
        if self._first is None:
            self._first = self.rng.randrange(self.first_within)
        if position == self._first:
            return True
        if position < self._first:
            return False
        behind = self.done < self.minimum and position >= self.first_within
        return self.rng.random() < (max(0.5, self.rate) if behind else self.rate)

    def satisfied(self) -> bool:
        return self.done >= self.minimum


@dataclass
class MethodRun:
    samples_ms: list[float] = field(default_factory=list)


class TimingMethod(ABC):
    name: str
    headline: str = "median"
    """The statistic upstream reports ('median' or 'mean'); the task's score uses it."""
    description: str = ""

    def warm_up(self, runner: TimingRunner, *, flush_l2: bool) -> None:
        """Once per evaluation, on the first benchmark config, before it is timed (upstream modes warm up there)."""

    @abstractmethod
    def run(self, runner: TimingRunner, *, flush_l2: bool) -> MethodRun: ...


def rerandomised(runner: TimingRunner, call: Call, plan: FreshPlan) -> bool:
    """Re-randomise ``call``'s activations now (outside any window) if the task allows it; whether it did."""
    values = runner.fresh_values(call)
    if values is None:
        return False
    runner.rerandomise(call, values)
    plan.done += 1
    return True
