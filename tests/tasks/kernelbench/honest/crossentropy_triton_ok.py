"""Honest Triton cross-entropy for level1/95_CrossEntropyLoss: one program per row computes the row's logsumexp online
(running max and rescaled sum over blocks of classes) minus its target logit; a second kernel averages the rows.
Expected: passed (every config)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_losses(x_ptr, t_ptr, loss_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    s = 0.0
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=-float("inf"))
        new_m = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - new_m) + tl.sum(tl.exp(x - new_m), axis=0)
        m = new_m
    t = tl.load(t_ptr + row)
    tl.store(loss_ptr + row, m + tl.log(s) - tl.load(x_ptr + row * cols + t))


@triton.jit
def _mean(v_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(v_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) / n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x, t = predictions.contiguous(), targets.contiguous()
        rows, cols = x.shape
        losses = torch.empty(rows, device=x.device, dtype=torch.float32)
        out = torch.empty((), device=x.device, dtype=torch.float32)
        _row_losses[(rows,)](x, t, losses, cols, BLOCK=1024)
        _mean[(1,)](losses, out, rows, BLOCK=1024)
        return out
