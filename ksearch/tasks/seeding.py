"""Seeding torch's global random generator for a problem file's own draws, one thread at a time.

KernelBench problems and user ops draw their inputs and weights from torch's *global* generator (``get_inputs``,
``Model(...)``), so ksearch seeds it with the config's seed around those calls and restores it after
(``torch.random.fork_rng``). That state is one per process: two search cycles doing it at once on their own threads
(the agent probes a task's inputs while it judges a timing ledger) would draw from each other's seeds; a thread-safety
review (2026-11-29) saw an honest kernel's activation probe come out wrong that way. The lock makes each seeded
block whole.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

_GLOBAL_RNG_LOCK = threading.RLock()


@contextmanager
def seeded_global_rng(seed: int) -> Iterator[None]:
    """torch's global CPU generator seeded with ``seed`` inside the block, restored after; exclusive across threads."""
    with _GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
