"""Honest Triton Frobenius-norm normalisation for level1/37_FrobeniusNorm_: per-block sums of squares, a second
kernel reduces them, a third divides. Expected: passed (every config)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _block_squares(x_ptr, partial_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(partial_ptr + pid, tl.sum(x * x, axis=0))


@triton.jit
def _total(partial_ptr, out_ptr, count, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, count, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(partial_ptr + offs, mask=offs < count, other=0.0)
    tl.store(out_ptr, tl.sqrt(tl.sum(acc, axis=0)))


@triton.jit
def _divide(x_ptr, norm_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    norm = tl.load(norm_ptr)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) / norm, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n = x.numel()
        block = 65536
        blocks = triton.cdiv(n, block)
        partial = torch.empty(blocks, device=x.device, dtype=torch.float32)
        norm = torch.empty(1, device=x.device, dtype=torch.float32)
        _block_squares[(blocks,)](x, partial, n, BLOCK=block)
        _total[(1,)](partial, norm, blocks, BLOCK=1024)
        y = torch.empty_like(x)
        _divide[(blocks,)](x, norm, y, n, BLOCK=block)
        return y
