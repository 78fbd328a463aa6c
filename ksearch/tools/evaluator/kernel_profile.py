"""A per-kernel profile of one call of the candidate per timed shape, for the model: which kernels a call launches,
how long each takes, and how much of the call is host time between them (launch overhead).

Taken by the worker after its timing phase (phase ``profile``, which the parent's ledger does not count), on fresh
inputs of each benchmark config, with PyTorch's profiler recording CUDA activity (CUPTI): it never runs inside a
timed sample, and its figures are diagnostics that never decide a verdict or a promotion. A call that fails here
is left out (it already passed the checks). ``summarise`` is pure and does the arithmetic.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from ksearch.contracts.evaluation import ProfiledKernel, ShapeProfile

PROFILE_KERNELS = 8
"""The kernels listed per shape (longest first); the rest are counted."""


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
        ProfiledKernel(name=name, launches=len(times), time_ms=round(sum(times) / 1000.0, 6),
                       share=round(sum(times) / 1000.0 / call_ms, 4) if call_ms > 0 else 0.0)  # fmt: skip
        for name, times in ranked[:PROFILE_KERNELS]
    ]
    return ShapeProfile(
        config=config, call_ms=round(call_ms, 6), kernel_ms=round(kernel_ms, 6),
        host_gap_ms=round(max(0.0, call_ms - kernel_ms), 6), launches=len(spans), kernels=kernels,
        other_kernels=max(0, len(ranked) - PROFILE_KERNELS),
    )  # fmt: skip


def device_spans(profiler: Any) -> list[tuple[str, float, float]]:
    """(name, start us, end us) of every device activity (kernels, copies, sets) a torch profiler recorded."""
    from torch.autograd import DeviceType

    spans = []
    for event in profiler.events():
        if getattr(event, "device_type", None) == DeviceType.CUDA:
            spans.append((str(event.name), float(event.time_range.start), float(event.time_range.end)))
    return spans


def profile_shapes(worker: Any, module: Any) -> list[ShapeProfile]:
    """One profiled call per benchmark config of ``worker`` (an evaluate worker on a GPU, after timing)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    profiles: list[ShapeProfile] = []
    for config in worker.task.benchmark_configs(worker.device):
        salted = worker.salted(config, worker.request.bench_salt)
        try:
            fn = worker.task.prepare(module, salted, worker.device)
            inputs = worker.task.make_inputs(salted, worker.device)
            args = worker.task.call_args(inputs, salted)
            fn(*args)  # unprofiled: the profiled call is the steady state the timing saw (data object reused)
            torch.cuda.synchronize(worker.device)
            with profile(activities=[ProfilerActivity.CUDA]) as profiler:
                started = time.perf_counter()
                fn(*args)
                torch.cuda.synchronize(worker.device)
                call_ms = (time.perf_counter() - started) * 1000.0
            profiles.append(summarise(config.name, call_ms, device_spans(profiler)))
        except Exception:  # noqa: BLE001 - a diagnostic: a call that fails here is left out
            continue
        finally:
            inputs = args = None  # noqa: F841 - this config's tensors go before the next is made
    return profiles
