"""Honest Triton hinge loss for level1/100_HingeLoss: each program reduces one block of the flattened predictions,
a second kernel adds the blocks up. ``predictions * targets`` broadcasts the (batch,) targets along the LAST
dimension, so target j scales column j. Expected: passed (every config)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _hinge_blocks(p_ptr, t_ptr, partial_ptr, n, cols, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    p = tl.load(p_ptr + offs, mask=mask, other=0.0)
    t = tl.load(t_ptr + offs % cols, mask=mask, other=0.0)
    tl.store(partial_ptr + pid, tl.sum(tl.where(mask, tl.maximum(1.0 - p * t, 0.0), 0.0), axis=0))


@triton.jit
def _mean(partial_ptr, out_ptr, count, total, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, count, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(partial_ptr + offs, mask=offs < count, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) / total)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        predictions, targets = predictions.contiguous(), targets.contiguous()
        n, cols = predictions.numel(), predictions.shape[-1]
        blocks = triton.cdiv(n, 16384)
        partial = torch.empty(blocks, device=predictions.device, dtype=torch.float32)
        out = torch.empty((), device=predictions.device, dtype=torch.float32)
        _hinge_blocks[(blocks,)](predictions, targets, partial, n, cols, BLOCK=16384)
        _mean[(1,)](partial, out, blocks, float(n), BLOCK=1024)
        return out
