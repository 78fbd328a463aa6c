"""Honest Triton kernel for level1/88_MinGPTNewGelu: the tanh form of GELU in one elementwise pass (the reference
takes six PyTorch ops). tanh(u) is computed as 1 - 2 / (exp(2u) + 1), exact at both tails. Expected: passed."""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@triton.jit
def _gelu(x_ptr, y_ptr, n, c, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    u = c * (x + 0.044715 * x * x * x)
    t = 1.0 - 2.0 / (tl.exp(2.0 * u) + 1.0)
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + t), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _gelu[(triton.cdiv(n, 4096),)](x, y, n, SQRT_2_OVER_PI, BLOCK=4096)
        return y
