"""Timing methods: how a candidate's latency is measured, as a registry of named methods.

Each method is a loop over a small set of primitives (``TimingRunner``) that the worker implements on the GPU with
device events, so the loops here contain the whole methodology and nothing device-specific. The stop rules are pure
functions of the samples taken so far, and so is the summary, so both are tested on synthetic sample streams.

Methods:

``robust`` (ksearch's default)
    warm-up of back-to-back calls (0.2 s, so the GPU's clocks are up); then blocks of back-to-back iterations, each
    ``[L2 flush (256 MB write, when the task asks)]; start.record(); out = fn(inputs); end.record()`` with inputs
    rotated among K pre-generated sets with different seeds, and one device-wide synchronize per block. The host never
    waits between the iterations of a block, so the GPU stays busy as under ``triton.testing.do_bench`` (a sync after
    every call leaves it idle between samples, its clocks drop and latencies come out up to several times too high
    and vary from run to run). Block lengths are random (about 10 ms of work each), and the last call of every block
    is audited: a stream-ordered copy of its output is taken right after its end event, then after the sync the
    worker's ``deferred_work`` check (work left unjoined on another stream), the input-mutation digest and, for a
    random sample (one per input set), the recheck by the checker. A candidate cannot tell which call is audited.
    Every call's output form and the harness guard are checked without a sync. Adaptive repetition until the
    relative standard error is below a target or a time cap. Headline statistic: median.
``gpumode``
    GPU MODE leaderboard mode (``eval.py``): fresh inputs each repeat with ``seed += 13``, no L2 flush,
    ``sync; start; fn; end; sync``, stop after >= 3 runs when std_err/mean < 0.001 or the summed kernel time > 30 s or
    wall time > 120 s, at most 100 repeats. Every timed output is rechecked upstream; here every one is kept for the
    checker while the outputs fit the recheck budget (a random sample of them beyond it). Headline statistic: mean.
``gpumode-benchmark``
    GPU MODE benchmark mode: one checked call, then the same inputs reused without recheck, 10 s cap. Headline: mean.
``flashinfer``
    flashinfer-bench 0.1.2 ``do_bench``: 3 trials with fresh inputs each; per trial 10 warm-up and 50 timed
    iterations, each preceded by a 256 MB ``zero_()`` L2 flush and a clone of every argument (outside the timed
    region, after the flush, as upstream does); ``sync; start; fn; end``. One deviation: a device-wide sync after
    each end event (for the integrity checks of the call), where upstream leaves it to the next iteration's sync;
    both sync before every start, so the timed region holds the entry function's host time as upstream's does.
    Headline statistic: arithmetic mean.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ksearch.contracts.exchange import FLUSH_BYTES  # noqa: F401 - re-exported by ksearch.tools.timing
from ksearch.errors import UserError
from ksearch.tools.timing.stats import gpumode_should_stop, robust_should_stop

SEED_STRIDE = 13
"""Input set ``i`` of a config uses seed ``base + 13 * i`` (GPU MODE's ``seed += 13``), for every method."""
MAX_INPUT_SETS = 100_000
"""Upper bound on input-set indices; the checker refuses any other seed."""


class TimingError(UserError, ValueError):
    """A timing method that does not exist or that the task does not support."""


class Event(Protocol):
    def record(self) -> None: ...

    def elapsed_time(self, end: Any) -> float: ...


class TimingRunner(Protocol):
    """What a timing method needs from the worker. Every call is the candidate's, guarded by the worker."""

    def inputs(self, index: int) -> list[Any]:
        """Input set ``index`` (seed ``base + 13 * index``), generated on first use and cached by the runner."""

    def fresh_inputs(self, index: int) -> list[Any]:
        """Input set ``index`` generated anew (not cached): for methods that never reuse inputs."""

    def clone(self, inputs: list[Any]) -> list[Any]: ...

    def call(self, inputs: list[Any]) -> Any:
        """One call of the candidate, not synchronised."""

    def flush(self) -> None:
        """Evict the L2 cache (a 256 MB write on the device)."""

    def synchronize(self) -> None:
        """Device-wide synchronize."""

    def event(self) -> Event: ...

    def wall(self) -> float:
        """Seconds on a monotonic clock (the harness's own reference, not the candidate's)."""

    def want(self, index: int) -> bool:
        """Whether the next output for input set ``index`` is to be kept for the checker (asked before the call)."""

    def early(self, output: Any) -> Any:
        """A stream-ordered copy of ``output`` taken right after the call (for the deferred-work check)."""

    def glance(self, output: Any) -> None:
        """Right after a call, without a sync: the checks that need no device work (harness guard, output form)."""

    def after(self, index: int, inputs: list[Any], output: Any, early: Any, keep: bool) -> None:
        """After the sync, for an audited call: integrity checks (deferred work when ``early`` is not None, inputs
        unchanged) and, when ``keep``, the output kept for the checker."""


@dataclass
class MethodRun:
    samples_ms: list[float] = field(default_factory=list)


class TimingMethod(ABC):
    name: str
    headline: str = "median"
    """The statistic upstream reports ('median' or 'mean'); the task's score always uses the median."""
    description: str = ""

    @abstractmethod
    def run(self, runner: TimingRunner, *, flush_l2: bool) -> MethodRun: ...

    def _timed(self, runner: TimingRunner, index: int, inputs: list[Any], *, sync_before: bool) -> float:
        """One timed call: [sync] start, call, end, device sync; the integrity hooks outside the timed region."""
        keep = runner.want(index)
        start, end = runner.event(), runner.event()
        if sync_before:
            runner.synchronize()
        start.record()
        output = runner.call(inputs)
        end.record()
        early = runner.early(output) if keep else None
        runner.synchronize()
        runner.glance(output)
        runner.after(index, inputs, output, early, keep)
        return float(start.elapsed_time(end))


@dataclass
class Robust(TimingMethod):
    name: str = "robust"
    headline: str = "median"
    description: str = (
        "device events around each call, calls back to back in blocks of random length (~10 ms) with one device-wide "
        "sync per block and the block's last call audited, L2 flush before each call, inputs rotated among 4 seeded "
        "sets, adaptive repetition to 1% relative SE or 2 s, median"
    )
    input_sets: int = 4
    warmup_s: float = 0.2
    min_samples: int = 10
    target_rel_se: float = 0.01
    time_cap_s: float = 2.0
    max_samples: int = 5000
    block_target_s: float = 0.01
    """Wall time aimed at per block: long enough that the sync between blocks leaves the GPU idle only briefly."""
    max_block: int = 64
    rng: random.Random = field(default_factory=random.SystemRandom)

    def run(self, runner: TimingRunner, *, flush_l2: bool) -> MethodRun:
        sets = [runner.inputs(k) for k in range(self.input_sets)]
        started, calls = runner.wall(), 0
        while calls < 3 or (calls < 10_000 and runner.wall() - started < self.warmup_s):
            if flush_l2:
                runner.flush()
            runner.glance(runner.call(sets[calls % len(sets)]))
            calls += 1
            if calls % 16 == 0:
                runner.synchronize()  # bound the queue so the wall clock tracks the device
        runner.synchronize()
        result = MethodRun()
        started, i, per_call_s = runner.wall(), 0, None
        while True:
            length = self.block_length(per_call_s)
            block_started = runner.wall()
            events, last_output = [], None
            for _ in range(length):
                k = i % len(sets)
                i += 1
                if flush_l2:
                    runner.flush()
                start, end = runner.event(), runner.event()
                start.record()
                last_output = runner.call(sets[k])
                end.record()
                runner.glance(last_output)
                events.append((start, end))
            keep = runner.want(k)
            early = runner.early(last_output)  # stream-ordered, outside the timed region
            runner.synchronize()
            runner.after(k, sets[k], last_output, early, keep)
            del last_output
            result.samples_ms.extend(float(s.elapsed_time(e)) for s, e in events)
            per_call_s = (runner.wall() - block_started) / length
            if robust_should_stop(
                result.samples_ms,
                runner.wall() - started,
                min_samples=max(self.min_samples, len(sets)),
                target_rel_se=self.target_rel_se,
                time_cap_s=self.time_cap_s,
                max_samples=self.max_samples,
            ):
                return result

    def block_length(self, per_call_s: float | None) -> int:
        """Calls in the next block: ~``block_target_s`` of work, uniformly random in [n/2, 3n/2], 2 at least."""
        if per_call_s is None:
            return 4
        n = max(2, min(self.max_block, round(self.block_target_s / max(per_call_s, 1e-7))))
        return self.rng.randint(max(2, n // 2), max(2, n + n // 2))


class _GpuModeRepeats(TimingMethod):
    """GPU MODE's repeat loop (``eval.py``): sync/start/call/end/sync per repeat until ``gpumode_should_stop``; the
    two upstream modes differ only in the inputs of each repeat and the kernel-time cap."""

    max_time_s: float  # the three limits are fields of each mode
    max_wall_s: float
    max_repeats: int

    def _repeat(self, runner: TimingRunner, inputs_for: Callable[[int], tuple[int, list[Any]]]) -> MethodRun:
        """``inputs_for(repeat)`` gives (input-set index, inputs) of each repeat."""
        result = MethodRun()
        started, i = runner.wall(), 0
        while True:
            index, inputs = inputs_for(i)
            result.samples_ms.append(self._timed(runner, index, inputs, sync_before=True))
            i += 1
            if gpumode_should_stop(
                result.samples_ms,
                runner.wall() - started,
                max_time_s=self.max_time_s,
                max_wall_s=self.max_wall_s,
                max_repeats=self.max_repeats,
            ):
                return result


@dataclass
class GpuMode(_GpuModeRepeats):
    name: str = "gpumode"
    headline: str = "mean"
    description: str = (
        "GPU MODE leaderboard mode: fresh inputs each repeat (seed += 13), no L2 flush, sync/start/call/end/sync, "
        "stop after >= 3 runs at std_err/mean < 0.001, 30 s kernel time or 120 s wall, max 100 repeats, mean"
    )
    max_time_s: float = 30.0
    max_wall_s: float = 120.0
    max_repeats: int = 100

    def run(self, runner: TimingRunner, *, flush_l2: bool) -> MethodRun:
        warm = runner.inputs(0)  # compile / autotune outside the timed loop (upstream warms up on the first case)
        runner.call(warm)
        runner.synchronize()
        return self._repeat(runner, lambda i: (i, runner.fresh_inputs(i)))


@dataclass
class GpuModeBenchmark(_GpuModeRepeats):
    name: str = "gpumode-benchmark"
    headline: str = "mean"
    description: str = (
        "GPU MODE benchmark mode: the same inputs reused, no recheck of timed outputs, no L2 flush, "
        "sync/start/call/end/sync, stop rule as gpumode with a 10 s kernel-time cap, mean"
    )
    max_time_s: float = 10.0
    max_wall_s: float = 120.0
    max_repeats: int = 100

    def run(self, runner: TimingRunner, *, flush_l2: bool) -> MethodRun:
        inputs = runner.inputs(0)
        runner.call(inputs)  # upstream: one checked call before the timed loop (the output is checked below)
        runner.synchronize()
        return self._repeat(runner, lambda _: (0, inputs))


@dataclass
class FlashInfer(TimingMethod):
    name: str = "flashinfer"
    headline: str = "mean"
    description: str = (
        "flashinfer-bench 0.1.2: 3 trials with fresh inputs, 10 warm-up + 50 timed iterations each, 256 MB zero_() "
        "L2 flush then a clone of every argument before each iteration, sync/start/call/end, arithmetic mean"
    )
    trials: int = 3
    warmup: int = 10
    iterations: int = 50

    def run(self, runner: TimingRunner, *, flush_l2: bool) -> MethodRun:
        result = MethodRun()
        for trial in range(self.trials):
            inputs = runner.inputs(trial)
            for _ in range(self.warmup):
                runner.flush()
                runner.call(runner.clone(inputs))
            runner.synchronize()
            for _ in range(self.iterations):
                runner.flush()
                args = runner.clone(inputs)
                result.samples_ms.append(self._timed(runner, trial, args, sync_before=True))
        return result


_REGISTRY: dict[str, Callable[[], TimingMethod]] = {
    "robust": Robust,
    "gpumode": GpuMode,
    "gpumode-benchmark": GpuModeBenchmark,
    "flashinfer": FlashInfer,
}
HEADLINE = {name: factory().headline for name, factory in _REGISTRY.items()}


def method_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def get_method(name: str) -> TimingMethod:
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise TimingError(f"unknown timing method {name!r}; known methods: {', '.join(_REGISTRY)}") from None


def resolve_method(task: Any, requested: str | None) -> str:
    """The method name to use for ``task``: ``requested`` or the task's default, which the task must support."""
    supported = tuple(getattr(task, "timing_methods", ("robust",)))
    name = requested if requested is not None else getattr(task, "default_timing_method", "robust")
    if name not in _REGISTRY:
        raise TimingError(f"unknown timing method {name!r}; known methods: {', '.join(_REGISTRY)}")
    if name not in supported:
        raise TimingError(
            f"task {getattr(task, 'name', '?')!r} does not support timing method {name!r}; "
            f"it supports: {', '.join(supported)}"
        )
    return name
