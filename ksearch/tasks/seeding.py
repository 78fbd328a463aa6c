"""Seeding torch's global random generator for a problem file's own draws, one thread at a time.

KernelBench problems and user ops draw their inputs and weights from torch's *global* generator (``get_inputs``,
``Model(...)``), so ksearch seeds it with the config's seed around those calls and restores it after
(``torch.random.fork_rng``). That state is one per process: two search cycles doing it at once on their own threads
(the agent probes a task's inputs while it judges a timing ledger) would draw from each other's seeds; a thread-safety
review (2026-11-29) saw an honest kernel's activation probe come out wrong that way. The lock makes each seeded
block whole.

``drawn_on`` runs such a draw on the device the inputs are for: KernelBench's level-1 ReLU draws a 6.4 GB
``torch.rand`` per config, about 10 s on the host and a few ms on an H100; an evaluation draws each config's inputs
in both the worker and the checker, about forty draws (2026-12-07, H100: a full-size ReLU evaluation still running
after 355 s, 60 s of a quarter-size one's 123 s in host ``torch.rand``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import torch

_GLOBAL_RNG_LOCK = threading.RLock()
T = TypeVar("T")


@contextmanager
def seeded_global_rng(seed: int, cuda_devices: tuple[int, ...] = ()) -> Iterator[None]:
    """torch's global CPU generator (and those of ``cuda_devices``) seeded with ``seed`` inside the block, restored
    after; exclusive across threads."""
    with _GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=list(cuda_devices)):
        torch.manual_seed(seed)
        yield


def drawn_on(device: str, seed: int, draw: Callable[[], T]) -> T:
    """``draw()`` with the global generators seeded by ``seed``; on a CUDA device, with ``device`` as torch's default
    device, so that its factory calls (``torch.rand(n, m)``) draw there rather than on the host. Two processes on one
    GPU draw the same values from one seed. A draw that needs host tensors (one that calls ``.numpy()``, say) fails
    there and is drawn again on the host, as before; running out of device memory is not retried (the caller's
    low-memory path handles it)."""
    target = torch.device(device)
    if target.type == "cuda":
        index = target.index if target.index is not None else torch.cuda.current_device()
        try:
            with seeded_global_rng(seed, (index,)), target:
                return draw()
        except torch.OutOfMemoryError:
            raise
        except Exception:  # noqa: BLE001 - any failure of the device draw falls back to the host draw below
            pass
    with seeded_global_rng(seed):
        return draw()
