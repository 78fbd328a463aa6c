"""A per-kernel profile of one call of the candidate per timed shape, for the model: which kernels a call launches,
how long each takes, and how much of the call is host time between them (launch overhead).

Taken after the timing, on fresh inputs of each benchmark config, with PyTorch's profiler recording CUDA activity
(CUPTI) in one session for all the shapes: it never runs inside a timed sample, and its figures are diagnostics that
never decide a verdict or a promotion. A call that fails here is left out (it already passed the checks).
``summarise`` and ``spans_in`` are pure and do the arithmetic.

Where it runs: in a profiling process beside the worker (``ksearch.tools.evaluator.parent.profile_process``), which
starts the profiler ahead of need (``warm_up``: CUPTI's start costs 4-7 s once per process, bench/profile_start.py) and
profiles once the worker has exited; or, where that process cannot share the worker's build (a C++ extension, the
graphs ``torch.compile`` built) or memory is short, in the worker after its timing phase (phase ``profile``, which
the parent's ledger does not count).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

from ksearch.contracts.evaluation import ProfiledKernel, ShapeProfile

PROFILE_KERNELS = 8
"""The kernels listed per shape (longest first); the rest are counted."""
FAILURE_CHARS = 300
"""A failed profiled call is quoted up to this many characters."""
PROFILE_NOTE = "profile: "
"""Prefix of a worker's note on the profile it could not take after its timing (the parent shows the rest as the
evaluation's ``profile`` problem, as it does for a profiling process's)."""
NOTE_CHARS = 400
"""A worker's note is read up to this many characters (the report is the candidate's word)."""


def summarise(config: str, call_ms: float, spans: Iterable[tuple[str, float, float]]) -> ShapeProfile:
    """The profile of one call from its device activity: ``spans`` are (kernel name, start, end) in microseconds."""
    spans = sorted((s for s in spans if s[2] >= s[1]), key=lambda s: s[1])
    by_name: dict[str, list[float]] = {}
    for name, start, end in spans:
        by_name.setdefault(name, []).append(end - start)
    busy_us = 0.0
    cursor = float("-inf")
    for _, start, end in spans:  # the union of the intervals: time the device ran at least one kernel
        if end <= cursor:
            continue
        busy_us += end - max(start, cursor)
        cursor = end
    kernel_ms = busy_us / 1000.0
    call_ms = max(call_ms, kernel_ms)
    ranked = sorted(by_name.items(), key=lambda item: -sum(item[1]))
    kernels = [
        ProfiledKernel(
            name=name,
            launches=len(times),
            time_ms=round(sum(times) / 1000.0, 6),
            share=round(sum(times) / 1000.0 / call_ms, 4) if call_ms > 0 else 0.0,
        )
        for name, times in ranked[:PROFILE_KERNELS]
    ]
    return ShapeProfile(
        config=config,
        call_ms=round(call_ms, 6),
        kernel_ms=round(kernel_ms, 6),
        host_gap_ms=round(max(0.0, call_ms - kernel_ms), 6),
        launches=len(spans),
        kernels=kernels,
        other_kernels=max(0, len(ranked) - PROFILE_KERNELS),
    )


MARK = "ksearch_profile:"
"""Prefix of the profiler range around each shape's profiled call."""


def spans_in(start: float, end: float, spans: list[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    """The device activity that started inside [start, end] (one shape's call: synchronised at both ends)."""
    return [s for s in spans if start <= s[1] <= end]


def activity(profiler: Any) -> Iterator[tuple[str, Any, float, float]]:
    """Every event a torch profiler recorded as (name, device type, start us, end us). Read from Kineto's own results
    when the profiler has them: ``profiler.events()`` first builds PyTorch's whole event tree in Python, none of which
    is needed here (on an H200 either way of reading took milliseconds; the profile's cost is the profiler's first
    start in each process, bench/profile_start.py)."""
    results = getattr(getattr(profiler, "profiler", None), "kineto_results", None)
    if results is not None:
        for event in results.events():
            yield str(event.name()), event.device_type(), event.start_ns() / 1000.0, event.end_ns() / 1000.0
        return
    for event in profiler.events():
        yield (
            str(event.name),
            getattr(event, "device_type", None),
            float(event.time_range.start),
            float(event.time_range.end),
        )


def recorded(profiler: Any) -> tuple[dict[str, tuple[float, float]], list[tuple[str, float, float]]]:
    """From a torch profiler: each shape's marked range by config name, and every device activity (kernels,
    copies, sets) as (name, start us, end us). The profiler also puts each marked range on the device's timeline (a
    user annotation spanning the range's kernels): that is no kernel, and counted as one it read as most of the call
    (seen on an H200: ``ksearch_profile:b0...: 1x, 82 %``)."""
    from torch.autograd import DeviceType

    ranges: dict[str, tuple[float, float]] = {}
    spans: list[tuple[str, float, float]] = []
    for name, device_type, start, end in activity(profiler):
        if device_type == DeviceType.CUDA:
            if not name.startswith(MARK):
                spans.append((name, start, end))
        elif name.startswith(MARK):
            ranges[name.removeprefix(MARK)] = (start, end)
    return ranges, spans


class NoProfiledCall(RuntimeError):
    """Every profiled call failed (the candidate passed its checks): says why the first did."""


class NoDeviceActivity(RuntimeError):
    """The profiler ran but saw no kernel: a profile would claim calls that launch nothing."""


def require_device_activity(device: str, calls: int, spans: list[tuple[str, float, float]]) -> None:
    """Raise ``NoDeviceActivity`` where calls on a GPU were profiled and the profiler saw no device activity at all."""
    if device.startswith("cuda") and calls and not spans:
        raise NoDeviceActivity(
            "the profiler recorded no kernel on the GPU (CUPTI gave no device activity: on nodes where the driver "
            "restricts profiling to administrators, NVreg_RestrictProfilingToAdminUsers=1, that must be lifted)"
        )


def activities(device: str = "cuda") -> list[Any]:
    """What the profiler records: host activity (the marked ranges) and, on a GPU, device activity (the kernels)."""
    from torch.profiler import ProfilerActivity

    return [ProfilerActivity.CPU, ProfilerActivity.CUDA] if device.startswith("cuda") else [ProfilerActivity.CPU]


def warm_up(device: str) -> None:
    """One profiler session around a tiny kernel, so that the process pays CUPTI's one-off start (seconds) now, before
    it is asked for a profile: a second session starts in about a millisecond (bench/profile_start.py)."""
    import torch
    from torch.profiler import profile

    with profile(activities=activities(device)):
        torch.ones(1, device=device).add_(1)
        torch.cuda.synchronize(device)


def profile_shapes(worker: Any, module: Any) -> list[ShapeProfile]:
    """One profiled call per benchmark config of ``worker`` (an evaluate worker on a GPU, after timing), in one
    profiler session (CUPTI is set up once): per config, fresh inputs, one unprofiled call (the steady state the
    timing saw: compiled, tuned, the data object reused), then the call inside a marked range, synchronised at both
    ends so that its kernels start and end inside it."""
    import torch
    from torch.profiler import profile, record_function

    def synchronize() -> None:  # on the CPU (tests of the processes around it) a call has no device activity
        if worker.device.startswith("cuda"):
            torch.cuda.synchronize(worker.device)

    calls: dict[str, float] = {}
    failures: list[str] = []
    started = time.perf_counter()
    with profile(activities=activities(worker.device)) as profiler:
        calls_started = time.perf_counter()
        for config in worker.task.benchmark_configs(worker.device):
            salted = worker.salted(config, worker.request.bench_salt)
            try:
                fn = worker.task.prepare(module, salted, worker.device)
                inputs = worker.task.make_inputs(salted, worker.device)
                args = worker.task.call_args(inputs, salted)
                fn(*args)
                synchronize()
                with record_function(MARK + config.name):
                    call_started = time.perf_counter()
                    fn(*args)
                    synchronize()
                    calls[config.name] = (time.perf_counter() - call_started) * 1000.0
            except Exception as exc:  # noqa: BLE001 - a diagnostic: a call that fails here is left out
                failures.append(f"{config.name}: {type(exc).__name__}: {exc}"[:FAILURE_CHARS])
                continue
            finally:
                inputs = args = None  # noqa: F841 - this config's tensors go before the next is made
        calls_ended = time.perf_counter()
    stopped = time.perf_counter()
    if failures and not calls:
        raise NoProfiledCall(f"no call could be profiled ({len(failures)} failed); {failures[0]}")
    ranges, spans = recorded(profiler)
    require_device_activity(worker.device, len(calls), spans)
    # Where the stage's time goes (the profiler's start, the calls, its stop, reading its events), in the evaluation's
    # stage times: the profile's cost is a target of its own (bench/evidence.py).
    for stage, seconds in (
        ("profile_start", calls_started - started),
        ("profile_calls", calls_ended - calls_started),
        ("profile_stop", stopped - calls_ended),
        ("profile_read", time.perf_counter() - stopped),
    ):
        worker.stages[stage] = round(seconds, 3)
    return [
        summarise(name, call_ms, spans_in(*ranges[name], spans)) for name, call_ms in calls.items() if name in ranges
    ]
