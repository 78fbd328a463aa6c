"""Honest Triton softmax for level1/23_Softmax: one program per row, the max subtracted before exp.
Expected: passed (every config, also under the tolerance scaled to its tiny outputs)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax_rows(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    e = tl.where(mask, e, 0.0)
    tl.store(y_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        _softmax_rows[(rows,)](x, y, cols, BLOCK=triton.next_power_of_2(cols))
        return y
