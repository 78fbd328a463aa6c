"""Honest Triton kernel for level1/12_Matmul_with_diagonal_matrices_: diag(A) @ B is B with row i scaled by A[i], one
elementwise pass (what the reference's A.unsqueeze(1) * B computes too). Expected: passed."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _scale_rows(a_ptr, b_ptr, c_ptr, rows, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < cols
    scale = tl.load(a_ptr + row)
    tl.store(c_ptr + row * cols + offs, scale * tl.load(b_ptr + row * cols + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        A, B = A.contiguous(), B.contiguous()
        rows, cols = B.shape
        C = torch.empty_like(B)
        _scale_rows[(rows, triton.cdiv(cols, 1024))](A, B, C, rows, cols, BLOCK=1024)
        return C
