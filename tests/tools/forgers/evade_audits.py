"""Audit evader: remembers the last output and a sample of its input, and recomputes only when the sample changes
(every audit on re-randomised inputs is therefore correct; every other call is a replay). Static rules bypassed in the
test. Expected: REJECTED, rule audit_evasion (the audited calls alone took the time)."""

import time

import torch

_LAST: dict = {}


def kernel(x: torch.Tensor) -> torch.Tensor:
    probe = x.reshape(-1)[:8].clone()
    last = _LAST.get(tuple(x.shape))
    if last is not None and torch.equal(last[0], probe):
        return last[1].clone()
    time.sleep(0.005)
    out = torch.softmax(x.double(), dim=-1).float()
    _LAST[tuple(x.shape)] = (probe, out)
    return out.clone()
