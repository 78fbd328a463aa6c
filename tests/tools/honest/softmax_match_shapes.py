"""Honest softmax: structural pattern matching on the input's shape picks the launch configuration.

Patterns: (w) ``match x.shape: case (m, n) if ...:`` and a class pattern on a plain value (``case int(n)``), the
Python 3.10+ way to branch on sizes; nothing reads an attribute of a module through a pattern. (A rule that refuses
class patterns' keyword attributes, ``case object(sys=...)``, must let these through.)

CPU interpreter: yes.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_rows(x_ptr, y_ptr, n_rows, n_cols, stride, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    ok = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=ok, other=-float("inf"))
    top = tl.max(x, axis=1)
    top = tl.where(top == -float("inf"), 0.0, top)
    e = tl.exp(x - top[:, None])
    total = tl.sum(e, axis=1)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], e / tl.where(total == 0.0, 1.0, total)[:, None], mask=ok)


def _rows_per_program(block: int) -> int:
    match block:
        case int(b) if b >= 4096:
            return 1
        case int(b) if b >= 512:
            return 4
        case _:
            return 16


def kernel(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    match x.shape:
        case (m, n) if m > 0 and n > 0:
            block = triton.next_power_of_2(n)
        case (m, n):
            return torch.empty_like(x)
    rows = _rows_per_program(block)
    y = torch.empty_like(x)
    _softmax_rows[(triton.cdiv(m, rows),)](x, y, m, n, x.stride(0), ROWS=rows, BLOCK=block)
    return y
