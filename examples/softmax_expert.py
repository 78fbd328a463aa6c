"""An "expert" row-wise softmax for the built-in softmax task, written by the ksearch authors to demonstrate
``ksearch skills learn``: it carries two optimisations that a backward walk can take apart one at a time.

1. Online softmax: the row is streamed in column blocks while a running maximum and a rescaled running sum are kept,
   so a row of any width needs only one block of registers (a second pass writes the output).
2. Row batching: each program handles ROWS_PER_PROGRAM consecutive rows, so small rows do not launch one tiny program
   each.

It is correct (it passes `ksearch eval softmax examples/softmax_expert.py`), not tuned for any GPU.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_rows(x_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride, BLOCK: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    for r in range(ROWS_PER_PROGRAM):
        row = pid * ROWS_PER_PROGRAM + r
        if row < n_rows:
            m = float("-inf")
            l = 0.0
            for start in range(0, n_cols, BLOCK):
                cols = start + offs
                x = tl.load(x_ptr + row * x_stride + cols, mask=cols < n_cols, other=float("-inf"))
                m_new = tl.maximum(m, tl.max(x, axis=0))
                l = l * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
                m = m_new
            for start in range(0, n_cols, BLOCK):
                cols = start + offs
                x = tl.load(x_ptr + row * x_stride + cols, mask=cols < n_cols, other=float("-inf"))
                tl.store(y_ptr + row * y_stride + cols, tl.exp(x - m) / l, mask=cols < n_cols)


def kernel(x: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    block = min(1024, triton.next_power_of_2(n_cols))
    rows_per_program = 4
    grid = (triton.cdiv(n_rows, rows_per_program),)
    _softmax_rows[grid](x, y, n_rows, n_cols, x.stride(0), y.stride(0), BLOCK=block, ROWS_PER_PROGRAM=rows_per_program)
    return y
