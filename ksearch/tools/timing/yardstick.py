"""A bare GPU MODE benchmark loop: the yardstick ksearch's own timing is read against, in the same process.

Written from the published procedure of GPU MODE's evaluator (gpu-mode/reference-kernels, ``eval.py``, benchmark
mode without recheck) and nothing else. It imports no ksearch code and calls no harness check, so a reader can hold
it against upstream's loop line by line:

    repeat at most 100 times:
        synchronize; start = Event(); end = Event(); start.record(); out = fn(data); end.record(); synchronize
        keep start.elapsed_time(end); drop out
        after the third run, stop when std_err / mean < 0.001, when mean * runs exceeds 10 s of kernel time, or when
        120 s of wall time have passed (std is the sample standard deviation, std_err = std / sqrt(runs))

Used by the worker for ``ksearch eval --yardstick N`` (``Worker.yardstick``): rounds of this loop alternate with
rounds of ksearch's timing method on the same callable and data object, so whatever state the machine is in (on a
shared host the speed at which the CPU launches kernels moves by tens of percent for seconds at a time, and it sets
the time of a launch-bound call) reaches both alike and their ratio shows what ksearch's procedure itself changes.

On a machine without CUDA the loop times with ``time.perf_counter`` instead of CUDA events (so the CPU tests run
it); those readings compare nothing with upstream, which times on GPUs only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

MAX_REPEATS = 100
MAX_KERNEL_NS = 10e9
MAX_WALL_NS = 120e9
TARGET_REL_ERR = 0.001


def should_stop(durations: list[float], wall_ns: float) -> bool:
    """Upstream's stopping rule after a run (durations in ms)."""
    runs = len(durations)
    if runs >= MAX_REPEATS:
        return True
    if runs < 3:
        return False
    mean = sum(durations) / runs
    std = math.sqrt(sum((x - mean) ** 2 for x in durations) / (runs - 1))
    err = std / math.sqrt(runs)
    return err / mean < TARGET_REL_ERR or mean * 1e6 * runs > MAX_KERNEL_NS or wall_ns > MAX_WALL_NS


def bare_benchmark(fn: Callable[..., Any], args: tuple[Any, ...], *, cuda: bool = True) -> list[float]:
    """Durations (ms) of ``fn(*args)`` on the SAME argument objects, timed as upstream's benchmark loop times them."""
    import torch

    durations: list[float] = []
    started = time.perf_counter_ns()
    while True:
        if cuda:
            torch.cuda.synchronize()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            output = fn(*args)
            end.record()
            torch.cuda.synchronize()
            duration_ms = start.elapsed_time(end)
        else:
            t0 = time.perf_counter()
            output = fn(*args)
            duration_ms = (time.perf_counter() - t0) * 1e3
        del output
        durations.append(duration_ms)
        if should_stop(durations, time.perf_counter_ns() - started):
            return durations
