"""Seeding torch's global random generator for a problem file's own draws, one thread at a time.

KernelBench problems and user ops draw their inputs and weights from torch's *global* generator (``get_inputs``,
``Model(...)``), so ksearch seeds it with the config's seed around those calls and restores it after
(``torch.random.fork_rng``). That state is one per process: two search cycles doing it at once on their own threads
(the agent probes a task's inputs while it judges a timing ledger) would draw from each other's seeds; a thread-safety
review (2026-11-29) saw an honest kernel's activation probe come out wrong that way. The lock makes each seeded
block whole.

``drawn_on`` runs such a draw on the device the inputs are for (where the draw runs on the meta device):
KernelBench's level-1 ReLU draws a 6.4 GB ``torch.rand`` per config, about 10 s on the host and a few ms on an H100;
an evaluation draws each config's inputs in both the worker and the checker, about forty draws (2026-12-07, H100: a
full-size ReLU evaluation still running after 355 s, 60 s of a quarter-size one's 123 s in host ``torch.rand``).
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
    """``draw()`` with the global generators seeded by ``seed``; on a CUDA device whose draw runs on the meta device
    (``draws_on_device``), with ``device`` as torch's default device, so that its factory calls (``torch.rand(n,
    m)``) draw there rather than on the host. Two processes on one GPU draw the same values from one seed.

    Where a draw is made is decided from the draw alone, never from how it fared: the worker and the checker each
    draw a config's inputs, and had one of them fallen back to the host after a device error of its own (memory the
    candidate holds in the worker only), the two would hold different values and an honest kernel would be rejected
    for the digest (a red-team read of 2026-12-07). A draw that needs host tensors (``.numpy()``) fails on the meta
    device too and is drawn on the host in both; an error of the device draw itself is raised."""
    target = torch.device(device)
    if target.type == "cuda" and draws_on_device(draw):
        index = target.index if target.index is not None else torch.cuda.current_device()
        with seeded_global_rng(seed, (index,)), target:
            return draw()
    with seeded_global_rng(seed):
        return draw()


def draws_on_device(draw: Callable[[], object]) -> bool:
    """Whether ``draw()`` runs with the meta device as torch's default: shapes only, no memory, no generator, the
    same answer in every process for one problem file."""
    try:
        with seeded_global_rng(0), torch.device("meta"):  # a draw that seeds the generator itself changes nothing
            draw()
    except Exception:  # noqa: BLE001 - any failure there means the draw needs the host (``.numpy()``, ``.item()``)
        return False
    return True
