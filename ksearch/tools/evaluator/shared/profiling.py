"""A developer's aid: ``KSEARCH_PROFILE=DIR`` makes every evaluator worker and checker write ``cProfile`` statistics
into DIR (``worker-PID-TAG-1.pstats``; ``checker-PID-TAG-N.pstats`` after each evaluation it finished), to find where
the time to a verdict goes (``python -m pstats FILE``). TAG is random per process: a sandboxed process has its own PID
namespace, so every worker's PID is the same small number. Off unless the variable is set; nothing else changes.

With ``KSEARCH_MEMORY_HISTORY=1`` as well, a process on a GPU also records its caching allocator's history and writes
it beside each statistics file (``NAME-PID-TAG-N.memory.pickle``, torch's snapshot format; ``bench/memory_timeline.py``
reads what was alive at the peak and where it was allocated): a full-size KernelBench evaluation's checker reserved
ten times its 6.4 GB input on an H100 (2026-12-07) where the CPU's accounting (``bench/kernelbench_memory.py``) finds
four."""

from __future__ import annotations

import contextlib
import cProfile
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from ksearch import settings

MEMORY_ENTRIES = 200_000
"""Allocator events kept per dump (torch drops the oldest beyond it)."""


def profile_dir() -> Path | None:
    value = settings.PROFILE.raw()
    return Path(value) if value else None


def records_memory() -> bool:
    """Whether this process records its GPU allocator's history (profiling on, the switch set, CUDA present)."""
    if profile_dir() is None or settings.MEMORY_HISTORY.raw() in ("", "0"):
        return False
    import torch

    return torch.cuda.is_available()


def _start_memory_history() -> None:
    import torch

    torch.cuda.memory._record_memory_history(max_entries=MEMORY_ENTRIES)


def _dump_memory_history(path: Path) -> None:
    """Write the history so far to ``path`` and start a new one (each dump holds one evaluation's)."""
    import torch

    torch.cuda.memory._dump_snapshot(str(path))
    try:
        torch.cuda.memory._record_memory_history(max_entries=MEMORY_ENTRIES, clear_history=True)
    except TypeError:  # a torch without ``clear_history``: the next dump holds this one's events too
        pass


@contextlib.contextmanager
def profiled(name: str) -> Iterator[None]:
    """Profile the block into ``DIR/NAME-PID-TAG-1.pstats`` when profiling is on (a one-block ``Accumulating``)."""
    profile = Accumulating(name)
    try:
        with profile.around():
            yield
    finally:
        profile.dump()


class Accumulating:
    """A profiler switched on around each command of a long-lived process and dumped on request."""

    def __init__(self, name: str) -> None:
        self.folder = profile_dir()
        self.name = name
        self.dumps = 0
        self.tag = secrets.token_hex(4)
        self.profiler = cProfile.Profile() if self.folder is not None else None
        self.memory = records_memory()
        if self.memory:
            _start_memory_history()

    @contextlib.contextmanager
    def around(self) -> Iterator[None]:
        if self.profiler is None:
            yield
            return
        self.profiler.enable()
        try:
            yield
        finally:
            self.profiler.disable()

    def dump(self) -> None:
        if self.profiler is None or self.folder is None:
            return
        self.dumps += 1
        self.folder.mkdir(parents=True, exist_ok=True)
        stem = f"{self.name}-{os.getpid()}-{self.tag}-{self.dumps}"
        self.profiler.dump_stats(str(self.folder / f"{stem}.pstats"))
        if self.memory:
            _dump_memory_history(self.folder / f"{stem}.memory.pickle")
        self.profiler = cProfile.Profile()
