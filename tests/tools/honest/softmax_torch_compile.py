"""Honest softmax: the math written with PyTorch element-wise and reduction ops, compiled by ``torch.compile``.

Patterns: (r) ``@torch.compile(dynamic=True)`` on the math (Inductor generates the fused kernel: Triton on a GPU,
C++ on the CPU; its compile-pool threads are torch's own), a float32 max-subtracted exponent.

CPU interpreter: yes (Inductor builds C++ on the CPU; slow on the first shape).
"""

import torch


@torch.compile(dynamic=True)
def _softmax(x: torch.Tensor) -> torch.Tensor:
    shifted = x - x.amax(dim=-1, keepdim=True)
    e = torch.exp(shifted)
    return e / e.sum(dim=-1, keepdim=True)


def kernel(x: torch.Tensor) -> torch.Tensor:
    return _softmax(x)
