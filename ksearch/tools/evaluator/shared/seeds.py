"""Seeds and input digests shared by the candidate's worker and the trusted checker.

Seeds: each config's public seed is combined with a secret salt drawn by the parent (``secrets.randbits``). The
correctness configs use the salt of the evaluator session (one per run and GPU), so the checker computes their
reference outputs once per session; timed inputs use a salt drawn for each evaluation. The salts reach the worker
in its request, so the candidate *can* read them while it runs; that is acceptable because they are unpredictable
when the code was written, so outputs cannot be precomputed for them (GPU MODE's secret seed has the same property),
and every timed output is checked on inputs no earlier candidate saw.

Input set ``k`` of a config uses seed ``salted + 13 * k`` (GPU MODE's ``seed += 13``); audits after a timing loop
re-randomise the task's activation inputs with sets from ``AUDIT_BASE`` on.
"""

from __future__ import annotations

import hashlib
from typing import Any

SEED_MODULUS = 2**31 - 2**22
"""Salted seeds stay below 2**31 (even after ``+ 13 * index``) so tasks may feed them to any RNG."""
DIGEST_SAMPLE = 4096
"""Elements sampled (evenly strided) per tensor for the input digest. It is computed three times per audit, twice of
them on the loop's path (the worker's, after the call; the checker's, while the worker waits): on an H200's host,
16384 (a dozen TriMul tensors, ~0.5 MB) took 1.5-1.8 ms, 1.0 of it hashing, and 4096 0.6 ms (2026-11-30). The digest
says the inputs are the ones the seeds make and that the call left them so; a sample of any size is at known
positions, so it catches a kernel that overwrites its inputs (a scratch buffer), not one that hides a mark in them:
what stops a kernel that tells an audit by a mark of its own is the checked output and ``audit_evasion``."""
SEED_STRIDE = 13
"""Input set ``k`` of a config uses seed ``base + 13 * k`` (GPU MODE's ``seed += 13``), for every method."""
MAX_INPUT_SETS = 100_000
"""Upper bound on input-set indices; the checker refuses any other seed."""
FRESH_SET_BASE = 1_000
"""Input-set indices from here up to ``AUDIT_BASE`` are fresh input sets whose seeds the checker issues when a timed
call needs one (``gpumode``, ``confirm``): below are the sets a loop reuses (rotated sets, trials)."""
AUDIT_BASE = 60_000
"""Input-set indices from here on are the activation seeds of audits (issued by the checker when a loop re-randomises
a set's activations; never used by a timing loop as a set)."""


def input_set_seed(base: int, index: int) -> int:
    return base + SEED_STRIDE * index


def input_set_index(base: int, seed: int) -> int | None:
    """The index ``k`` with ``seed == base + 13 * k`` and ``0 <= k < MAX_INPUT_SETS``, else None."""
    offset = seed - base
    if offset % SEED_STRIDE or not 0 <= offset // SEED_STRIDE < MAX_INPUT_SETS:
        return None
    return offset // SEED_STRIDE


def salted_seed(public_seed: int, salt: int) -> int:
    """The seed a config really uses in one evaluation: a hash of its public seed and the evaluation's salt."""
    digest = hashlib.blake2b(f"{public_seed}|{salt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % SEED_MODULUS


def input_digest(inputs: list[Any]) -> str:
    """A cheap digest of a list of inputs: dtype, shape and an evenly strided sample of each tensor's bytes. Read
    through ``tensor_access`` only: the inputs have been in the candidate's hands, and a method it set on one of them
    must not decide what the digest reads."""
    import torch

    from ksearch.tools.evaluator.shared import tensor_access as ta

    h = hashlib.sha256()  # hardware-accelerated on current hosts: twice blake2b's speed here
    samples = []  # gathered on the device and copied to the host once (one synchronisation, not one per tensor)
    for item in inputs:
        if ta.is_tensor(item):
            t = ta.detach(item)
            h.update(f"T|{ta.dtype(t)}|{ta.shape(t)}|".encode())
            count = ta.numel(t)
            if count:
                step = max(1, count // DIGEST_SAMPLE)
                sample = ta.contiguous(ta.every(ta.reshape(t, -1), step))
                if ta.dtype(sample) == torch.bool:
                    sample = ta.to(sample, torch.uint8)
                samples.append(ta.reshape(ta.view(sample, torch.uint8), -1))
        elif isinstance(item, (list, tuple)):
            h.update(f"L{len(item)}|".encode())
            h.update(input_digest(list(item)).encode())
        else:
            h.update(f"V|{item!r}|".encode())
    by_device: dict[Any, list[Any]] = {}
    for sample in samples:
        by_device.setdefault(ta.device(sample), []).append(sample)
    for group in by_device.values():
        h.update(ta.host_bytes(group))
    return h.hexdigest()[:32]
