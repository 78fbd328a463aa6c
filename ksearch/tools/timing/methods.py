"""Timing methods: how a candidate's latency is measured, as a registry of named methods.

Each method is a loop over a small set of primitives (``TimingRunner``) that the worker implements on the device, so
the loops here hold the whole methodology and nothing device-specific; they are tested with a fake runner. In every
method the timed region is exactly ``start.record(); out = fn(*args); end.record()``: ksearch's own checks (harness
guard, output form, deferred work, input digest, the checker's recheck) run before the start event or after the end
event, never between them. ``runner.call_on`` builds a call (inputs and the argument object) before the region.

Methods:

``gpumode-benchmark`` (upstream GPU MODE ``benchmark`` mode, what K-Search reported)
    once per evaluation a warm-up on the first benchmark config (its own argument object; a first call, then repeats
    until 100 or 0.1 s of summed kernel time, durations discarded); then per config: build the argument object once,
    one call whose output the checker judges, then ``sync; start; out = fn(data); end; sync`` on that SAME object
    (so caches a kernel keeps in it, such as derived weights, persist as upstream), no L2 flush, at most 100 repeats,
    stopping after >= 3 when std_err/mean < 0.001, or 10 s of summed kernel time, or 120 s of wall time. Headline:
    mean. After the loop (not between repeats): the last timed output goes to the checker, the inputs must be
    unchanged, and one more call on the same objects with the activations re-randomised in place must be correct
    (an output replayed from an earlier call fails it).
``gpumode`` (upstream GPU MODE ``leaderboard`` mode, the scored one)
    warm-up as above with a 10 ms budget; per config a first checked call, then every repeat on freshly generated
    inputs (``seed += 13``) and a new argument object, ``sync; start; fn; end; sync``, and the checker rechecks every
    timed output between repeats (upstream checks each one in the same place); 30 s cap. Headline: mean.
``robust`` (ksearch's own)
    warm-up of back-to-back calls (0.2 s, so the GPU's clocks are up); then blocks of back-to-back calls, each
    ``[L2 flush]; start; out = fn(*args); end`` with inputs rotated among K seeded sets and a new argument object per
    call, one device-wide synchronize per block. Each block is enqueued behind a spin kernel lasting about the block's
    device time (``hold``), so the host stays ahead of the device and the events time the device's work rather than
    the speed at which the host launches it: on a launch-bound shape (a call of many short kernels) that speed moved
    the median by up to 50 % between evaluations. Host time per call beyond about twice the device time still shows
    (the hold covers one block's device time, capped at ``hold_cap_ms``). Block lengths are random (about 10 ms of work each) and the last
    call of every block is audited after its end event: a stream-ordered copy of its output goes to the checker,
    which recomputes nothing it has seen and compares; the deferred-work check and the input digest run after the
    sync. A candidate cannot tell which call is audited. Adaptive repetition until the relative standard error is
    below a target or a time cap; re-randomised-activation audits after the loop. Headline: median.
``flashinfer`` (flashinfer-bench 0.1.2 ``do_bench``)
    3 trials on fresh inputs; per trial 10 warm-up and 50 timed iterations, each preceded by a 256 MB ``zero_()``
    L2 flush and a clone of every argument (after the flush, outside the timed region), then
    ``sync; start; fn; end`` with no sync after the end event; one sync per trial. Headline: arithmetic mean.
"""

from __future__ import annotations

import random
import statistics
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

    def event(self) -> Event: ...

    def record(self, event: Event) -> None: ...

    def elapsed(self, start: Event, end: Event) -> float:
        """Milliseconds between two recorded events (through the harness's own reference to ``elapsed_time``)."""

    def synchronize(self) -> None:
        """Device-wide synchronize."""

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

    def audit(self, call: Call, output: Any) -> None:
        """A timed call's output to the checker: staged in stream order, then synchronize, deferred-work check,
        inputs unchanged, and the checker's verdict (raises when it fails)."""

    def audit_fresh_values(self, call: Call) -> None:
        """After a loop: re-randomise the activation inputs of ``call``'s set in place, call once more on the same
        argument object, and audit that output."""

    def want_audit(self, index: int) -> bool:
        """Whether the output of the block that just ended is to be checked (a random sample, at least once per
        input set)."""


# -- methods --------------------------------------------------------------------------------------------------------
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


class _GpuModeRepeats(TimingMethod):
    """GPU MODE's repeat loop (``eval.py``): ``sync; start; out = fn(data); end; sync`` until ``gpumode_should_stop``.
    The two upstream modes differ in each repeat's call, the check between repeats and the kernel-time cap."""

    max_time_s: float  # the limits are fields of each mode
    warmup_time_s: float
    max_wall_s: float = 120.0
    max_repeats: int = 100

    def _repeat(
        self,
        runner: TimingRunner,
        call_for: Callable[[int], Call],
        *,
        max_time_s: float,
        audit_each: bool,
        audit_last: bool,
    ) -> MethodRun:
        result = MethodRun()
        started, i = runner.wall(), 0
        while True:
            call = call_for(i)
            runner.prime(call)
            runner.synchronize()
            start, end = runner.event(), runner.event()
            runner.record(start)
            output = call()
            runner.record(end)
            runner.synchronize()
            result.samples_ms.append(runner.elapsed(start, end))
            i += 1
            stop = gpumode_should_stop(
                result.samples_ms, runner.wall() - started,
                max_time_s=max_time_s, max_wall_s=self.max_wall_s, max_repeats=self.max_repeats,
            )  # fmt: skip
            # Between repeats upstream does next to nothing; the full host checks (guard, output form) run on the
            # first and the last repeat and whenever the output is audited, a type check on the others. The timers
            # the loop uses are the harness's own references, so a replaced timer cannot change a sample.
            if i == 1 or stop or audit_each:
                runner.after(call, output)
            else:
                runner.glance(call, output)
            if audit_each or (audit_last and stop):
                runner.audit(call, output)
            del output
            if stop:
                return result

    def warm_up(self, runner: TimingRunner, *, flush_l2: bool) -> None:
        call = runner.call_on(0, reuse_args=False)  # upstream generates the warm-up case's inputs separately
        runner.prime(call)
        output = call()
        runner.after(call, output)
        del output
        self._repeat(runner, lambda _: call, max_time_s=self.warmup_time_s, audit_each=False, audit_last=False)

    def _first_checked_call(self, runner: TimingRunner) -> Call:
        call = runner.call_on(0)
        runner.prime(call)
        output = call()
        runner.after(call, output)
        runner.audit(call, output)  # upstream: one checked call before the timed loop
        del output
        return call


@dataclass
class GpuModeBenchmark(_GpuModeRepeats):
    name: str = "gpumode-benchmark"
    headline: str = "mean"
    description: str = (
        "GPU MODE benchmark mode: warm-up on the first config, then per config one checked call and repeats of "
        "sync/start/custom_kernel(data)/end/sync on the same data object, no L2 flush, stop after >= 3 runs at "
        "std_err/mean < 0.001, 10 s kernel time or 120 s wall, max 100 repeats, mean; audits after the loop"
    )
    max_time_s: float = 10.0
    warmup_time_s: float = 0.1

    def run(self, runner: TimingRunner, *, flush_l2: bool) -> MethodRun:
        call = self._first_checked_call(runner)
        result = self._repeat(runner, lambda _: call, max_time_s=self.max_time_s, audit_each=False, audit_last=True)
        runner.audit_fresh_values(call)
        return result


@dataclass
class GpuMode(_GpuModeRepeats):
    name: str = "gpumode"
    headline: str = "mean"
    description: str = (
        "GPU MODE leaderboard mode: warm-up on the first config, then per config one checked call and repeats on "
        "fresh inputs (seed += 13) with sync/start/custom_kernel(data)/end/sync, every timed output rechecked between "
        "repeats, no L2 flush, stop after >= 3 runs at std_err/mean < 0.001, 30 s kernel time or 120 s wall, max 100 "
        "repeats, mean"
    )
    max_time_s: float = 30.0
    warmup_time_s: float = 0.01

    def run(self, runner: TimingRunner, *, flush_l2: bool) -> MethodRun:
        self._first_checked_call(runner)
        return self._repeat(
            runner, lambda i: runner.call_on(i + 1, fresh=True), max_time_s=self.max_time_s, audit_each=True,
            audit_last=True,
        )  # fmt: skip


@dataclass
class Robust(TimingMethod):
    name: str = "robust"
    headline: str = "median"
    description: str = (
        "device events around each call, calls back to back in blocks of random length (~10 ms) with one device-wide "
        "sync per block and the block's last call audited, L2 flush before each call (when the task asks), inputs "
        "rotated among 4 seeded sets with a new argument object per call, adaptive repetition to 1% relative SE or "
        "2 s, median"
    )
    input_sets: int = 4
    warmup_s: float = 0.2
    min_samples: int = 10
    target_rel_se: float = 0.01
    time_cap_s: float = 2.0
    max_samples: int = 5000
    block_target_s: float = 0.01
    """Device time aimed at per block: long enough that the sync between blocks leaves the GPU idle only briefly."""
    max_block: int = 64
    hold_cap_ms: float = 50.0
    """Longest spin kernel before a block (its length is the block's expected device time)."""
    fresh_value_audits: bool = True
    rng: random.Random = field(default_factory=random.SystemRandom)

    def run(self, runner: TimingRunner, *, flush_l2: bool) -> MethodRun:
        sets = self.input_sets
        started, calls = runner.wall(), 0
        while calls < 3 or (calls < 10_000 and runner.wall() - started < self.warmup_s):
            call = runner.call_on(calls % sets, reuse_args=False)
            if flush_l2:
                runner.flush()
            runner.prime(call)
            runner.after(call, call())
            calls += 1
            if calls % 16 == 0:
                runner.synchronize()  # bound the queue so the wall clock tracks the device
        runner.synchronize()
        result = MethodRun()
        per_call_s = (runner.wall() - started) / calls  # until a block is timed: an upper bound on the device time
        started, i = runner.wall(), 0
        while True:
            length = self.block_length(per_call_s if i else None)
            runner.hold(min(self.hold_cap_ms, length * per_call_s * 1e3))
            events = []
            for _ in range(length):
                call = runner.call_on(i % sets, reuse_args=False)
                i += 1
                if flush_l2:
                    runner.flush()
                runner.prime(call)
                start, end = runner.event(), runner.event()
                runner.record(start)
                output = call()
                runner.record(end)
                runner.after(call, output)
                events.append((start, end))
            if runner.want_audit(call.index):
                runner.audit(call, output)  # staged in stream order after the end event, then synchronized
            else:
                runner.synchronize()
            del output
            block = [runner.elapsed(s, e) for s, e in events]
            result.samples_ms.extend(block)
            per_call_s = statistics.median(block) / 1e3
            if robust_should_stop(
                result.samples_ms,
                runner.wall() - started,
                min_samples=max(self.min_samples, sets),
                target_rel_se=self.target_rel_se,
                time_cap_s=self.time_cap_s,
                max_samples=self.max_samples,
            ):
                break
        if self.fresh_value_audits:
            for index in range(sets):
                runner.audit_fresh_values(runner.call_on(index))
        return result

    def block_length(self, per_call_s: float | None) -> int:
        """Calls in the next block: ~``block_target_s`` of device work, uniformly random in [n/2, 3n/2], 2 at least."""
        if per_call_s is None:
            return 4
        n = max(2, min(self.max_block, round(self.block_target_s / max(per_call_s, 1e-7))))
        return self.rng.randint(max(2, n // 2), max(2, n + n // 2))


@dataclass
class FlashInfer(TimingMethod):
    name: str = "flashinfer"
    headline: str = "mean"
    description: str = (
        "flashinfer-bench 0.1.2: 3 trials with fresh inputs, 10 warm-up + 50 timed iterations each, 256 MB zero_() "
        "L2 flush then a clone of every argument before each iteration, sync/start/call/end, one sync per trial, "
        "arithmetic mean"
    )
    trials: int = 3
    warmup: int = 10
    iterations: int = 50

    def run(self, runner: TimingRunner, *, flush_l2: bool) -> MethodRun:
        result = MethodRun()
        for trial in range(self.trials):
            runner.call_on(trial)  # the trial's inputs, generated once
            for _ in range(self.warmup):
                runner.flush()
                call = runner.call_on(trial, clone=True)
                runner.prime(call)
                runner.after(call, call())
            events = []
            for _ in range(self.iterations):
                runner.flush()
                call = runner.call_on(trial, clone=True)
                runner.prime(call)
                runner.synchronize()
                start, end = runner.event(), runner.event()
                runner.record(start)
                output = call()
                runner.record(end)
                runner.after(call, output)
                events.append((start, end))
            runner.audit(call, output)
            del output
            result.samples_ms.extend(runner.elapsed(s, e) for s, e in events)
            runner.audit_fresh_values(runner.call_on(trial))
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
