"""Peak CPU memory of a piece of code, from the profiler's allocation records: what the caching allocator of a GPU
would have to hold for the same code on the same tensors, in bytes or in units of an input's size."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")

ROWS, COLUMNS = 64, 16384
UNIT = ROWS * COLUMNS * 4
"""One input's bytes (float32), below the CPU's size budget, so the problem runs as written."""
PROBLEM = f"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand({ROWS}, {COLUMNS})]


def get_init_inputs():
    return []
"""
"""Level 1's ReLU (problem 19) at a size the CPU runs as written: input and output fit ``sizes.CPU_BUDGET_BYTES``."""


def peak_bytes(work: Callable[[], _T]) -> tuple[int, _T]:
    """The most bytes that allocations made inside ``work()`` held at once, and its result. Memory allocated before
    it started is not seen, not even as freed: make the tensors whose release matters inside ``work``."""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = work()
    records: list[tuple[int, int]] = []
    pending: list[Any] = list(prof.profiler.kineto_results.experimental_event_tree())
    while pending:
        node = pending.pop()
        if node.tag == _EventType.Allocation:
            records.append((node.start_time_ns, node.extra_fields.alloc_size))
        pending.extend(node.children)
    live = peak = 0
    for _, size in sorted(records):
        live += size
        peak = max(peak, live)
    return peak, result


def peak_units(work: Callable[[], _T], unit: int) -> tuple[float, _T]:
    """``peak_bytes`` in units of ``unit`` bytes (an input's size), rounded to a hundredth."""
    peak, result = peak_bytes(work)
    return round(peak / unit, 2), result
