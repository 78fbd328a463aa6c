"""Seeds and input digests shared by the candidate's worker and the trusted checker.

Seeds: each config's public seed is combined with a per-evaluation secret salt drawn by the parent
(``secrets.randbits``). The salt reaches the worker in its request file, so the candidate *can* read it while it
runs; that is acceptable because it is fresh for every evaluation and unpredictable when the code was written, so
outputs cannot be precomputed for it (GPU MODE's secret seed has the same property).
"""

from __future__ import annotations

import hashlib
from typing import Any

SEED_MODULUS = 2**31 - 2**22
"""Salted seeds stay below 2**31 (even after ``+ 13 * index``) so tasks may feed them to any RNG."""
DIGEST_SAMPLE = 65536
"""Elements sampled (evenly strided) per tensor for the input digest."""


def salted_seed(public_seed: int, salt: int) -> int:
    """The seed a config really uses in one evaluation: a hash of its public seed and the evaluation's salt."""
    digest = hashlib.blake2b(f"{public_seed}|{salt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % SEED_MODULUS


def input_digest(inputs: list[Any]) -> str:
    """A cheap digest of a list of inputs: dtype, shape and an evenly strided sample of each tensor's bytes."""
    import torch

    h = hashlib.blake2b(digest_size=16)
    for item in inputs:
        if isinstance(item, torch.Tensor):
            t = item.detach()
            h.update(f"T|{t.dtype}|{tuple(t.shape)}|".encode())
            if t.numel():
                flat = t.reshape(-1)
                step = max(1, flat.numel() // DIGEST_SAMPLE)
                sample = flat[::step].contiguous().cpu()
                if sample.dtype == torch.bool:
                    sample = sample.to(torch.uint8)
                h.update(sample.view(torch.uint8).numpy().tobytes())
        elif isinstance(item, (list, tuple)):
            h.update(f"L{len(item)}|".encode())
            h.update(input_digest(list(item)).encode())
        else:
            h.update(f"V|{item!r}|".encode())
    return h.hexdigest()
