"""Honest Triton cross-entropy for level1/95_CrossEntropyLoss: each program takes 16 rows and computes each row's
logsumexp online (running max and rescaled sum over blocks of classes) minus its target logit; a second kernel averages
the rows. (Rows by 16, not one per program: Triton's interpreter runs every program's block ops in Python, so the CPU
check costs one sixteenth as many.) Expected: passed (every config)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_losses(x_ptr, t_ptr, loss_ptr, rows, cols, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_in = r < rows
    r = tl.minimum(r, rows - 1)  # rows past the end repeat the last row; their losses are not stored
    m = tl.full((ROWS,), -float("inf"), tl.float32)
    s = tl.zeros((ROWS,), dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + r[:, None] * cols + offs[None, :], mask=offs[None, :] < cols, other=-float("inf"))
        new_m = tl.maximum(m, tl.max(x, axis=1))
        s = s * tl.exp(m - new_m) + tl.sum(tl.exp(x - new_m[:, None]), axis=1)
        m = new_m
    t = tl.load(t_ptr + r)
    tl.store(loss_ptr + r, m + tl.log(s) - tl.load(x_ptr + r * cols + t), mask=row_in)


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
        _row_losses[(triton.cdiv(rows, 16),)](x, t, losses, rows, cols, ROWS=16, BLOCK=512, num_warps=8)
        _mean[(1,)](losses, out, rows, BLOCK=1024)
        return out
