"""The harness's own costs inside a timed window, measured by a worker before it has read its request.

The parent holds every timed window against its own clock (``ksearch.tools.evaluator.parent.ledger``): the wall time of
a window may exceed the device time its samples claim only by what the harness itself does in it. Those costs are
measured here, in ``warm_start``, before the worker reads its request, so no candidate code has run in the process
yet and the figures reach the parent in the ``ready`` message, which the candidate cannot take back:

- ``window_overhead_ms``: a synchronised one-call window (``go`` message, start event, a trivial kernel, end event,
  synchronise, elapsed time, ``timed`` message) beyond its event time;
- ``call_overhead_ms``: the harness's host work per call of a back-to-back block (two events, two records, a flush
  launch, the guard's checks of every harness reference);
- ``gap_overhead_ms``: the harness's host work between two windows (the stop rule, the guard's checks, two events,
  a synchronisation);
- ``flush_ms``: one L2 flush (a 256 MB write);
- ``copy_gbps``: a device-to-device copy (bytes read plus written);
- ``host_copy_gbps``: the slower of a copy from the device to pageable host memory and back (bytes across), which the
  parent's rules use only where the staging buffer lies in host memory (no CUDA IPC there).

Each is the 90th percentile (or the median for device rates) of a few repetitions: a few milliseconds in all.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

REPEATS = 24
HOST_COPY_BYTES = 16 << 20
"""Bytes of each crossing to host memory measured (a few milliseconds at PCIe speed)."""


def calibrate(device: str) -> dict[str, float]:
    """The figures of ``ledger.Calibration`` for ``device`` (empty on the CPU, which never times)."""
    if not device.startswith("cuda"):
        return {}
    import torch

    from ksearch.contracts.exchange import FLUSH_BYTES
    from ksearch.tools.evaluator.worker.guard import Guard
    from ksearch.tools.timing.stats import gpumode_should_stop

    sink = os.open(os.devnull, os.O_WRONLY)
    try:
        tiny = torch.zeros(1, device=device)
        flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device=device)
        guard = Guard()
        window, calls, flushes, copies = [], [], [], []
        for _ in range(REPEATS):
            torch.cuda.synchronize(device)
            started = time.perf_counter()
            os.write(sink, b'{"op": "go", "config": 0, "run": 0}\n')
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            tiny.add_(1)
            end.record()
            torch.cuda.synchronize(device)
            sample = start.elapsed_time(end)
            os.write(sink, ('{"op": "timed", "config": 0, "samples": [%r]}\n' % sample).encode())
            window.append((time.perf_counter() - started) * 1e3 - sample)
        for _ in range(REPEATS):
            started = time.perf_counter()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            flush.zero_()
            start.record()
            tiny.add_(1)
            end.record()
            guard.verify("calibration")
            calls.append((time.perf_counter() - started) * 1e3)
        torch.cuda.synchronize(device)
        gaps = []
        history = [1.0 + 0.001 * i for i in range(60)]
        for _ in range(REPEATS):
            started = time.perf_counter()
            gpumode_should_stop(history, 1.0, max_time_s=10.0, max_wall_s=120.0, max_repeats=100)
            guard.verify("calibration")
            torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(device)
            gaps.append((time.perf_counter() - started) * 1e3)
        for _ in range(5):
            flushes.append(_device_ms(lambda: flush.zero_()))
            copies.append(_device_ms(lambda: flush.clone()))
        copy_ms = statistics.median(copies)
        try:
            host_gbps = _host_copy_gbps(device)
        except (RuntimeError, MemoryError):  # unmeasured: the rules assume their floor (host staging only)
            host_gbps = 0.0
        return {
            "window_overhead_ms": _p90(window),
            "window_overhead_median_ms": statistics.median(max(0.0, v) for v in window),
            "call_overhead_ms": _p90(calls),
            "gap_overhead_ms": _p90(gaps),
            "flush_ms": statistics.median(flushes),
            "copy_gbps": 2 * FLUSH_BYTES / (copy_ms * 1e6) if copy_ms > 0 else 1000.0,
            "host_copy_gbps": host_gbps,
        }
    finally:
        os.close(sink)


def _host_copy_gbps(device: str) -> float:
    """The slower direction of a crossing between the device and pageable host memory (as the staging buffer's
    mapping is where CUDA IPC is unavailable), the median of three each; 0 when nothing could be measured."""
    import torch

    source = torch.ones(HOST_COPY_BYTES, dtype=torch.uint8, device=device)
    host = torch.zeros(HOST_COPY_BYTES, dtype=torch.uint8)  # its pages touched, as a staging buffer's are after use
    times: dict[str, list[float]] = {"down": [], "up": []}
    for _ in range(3):
        for direction, work in (("down", lambda: host.copy_(source)), ("up", lambda: source.copy_(host))):
            torch.cuda.synchronize(device)
            started = time.perf_counter()
            work()
            torch.cuda.synchronize(device)
            times[direction].append(time.perf_counter() - started)
    slowest = max(statistics.median(v) for v in times.values())
    return HOST_COPY_BYTES / (slowest * 1e9) if slowest > 0 else 0.0


def _device_ms(work: Any) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    work()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))


def _p90(values: list[float]) -> float:
    ordered = sorted(max(0.0, v) for v in values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
