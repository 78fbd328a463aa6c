"""A developer's aid: ``KSEARCH_PROFILE=DIR`` makes every evaluator worker and checker write ``cProfile`` statistics
into DIR (``worker-PID-TAG-1.pstats``; ``checker-PID-TAG-N.pstats`` after each evaluation it finished), to find where
the time to a verdict goes (``python -m pstats FILE``). TAG is random per process: a sandboxed process has its own PID
namespace, so every worker's PID is the same small number. Off unless the variable is set; nothing else changes."""

from __future__ import annotations

import contextlib
import cProfile
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from ksearch import settings


def profile_dir() -> Path | None:
    value = settings.PROFILE.raw()
    return Path(value) if value else None


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
        self.profiler.dump_stats(str(self.folder / f"{self.name}-{os.getpid()}-{self.tag}-{self.dumps}.pstats"))
        self.profiler = cProfile.Profile()
