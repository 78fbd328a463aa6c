"""Correct Triton solution for level1/2_Sum_over_rows: sum over dim 1 of a (B, R, C) tensor, keepdim."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _sum_rows(x_ptr, y_ptr, R, C, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    b = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    col_mask = cols < C
    acc = tl.zeros((BLOCK_C,), dtype=tl.float32)
    for r0 in range(0, R, BLOCK_R):
        rows = r0 + tl.arange(0, BLOCK_R)
        mask = (rows[:, None] < R) & col_mask[None, :]
        tile = tl.load(x_ptr + b * R * C + rows[:, None] * C + cols[None, :], mask=mask, other=0.0)
        acc += tl.sum(tile, axis=0)
    tl.store(y_ptr + b * C + cols, acc, mask=col_mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert self.dim == 1 and x.dim() == 3, "this kernel sums a 3-D tensor over dim 1"
        x = x.contiguous()
        b, r, c = x.shape
        y = torch.empty((b, 1, c), device=x.device, dtype=x.dtype)
        block_c = min(128, triton.next_power_of_2(c))
        _sum_rows[(b, triton.cdiv(c, block_c))](x, y, r, c, BLOCK_R=32, BLOCK_C=block_c)
        return y
