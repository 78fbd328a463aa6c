"""A correct row-wise softmax whose launch is a sweep: one ``@triton.autotune`` over num_warps (issue 57)."""

import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({}, num_warps=w, num_stages=1) for w in (2, 4, 8)], key=["n_cols"])
@triton.jit
def _softmax_row(x_ptr, y_ptr, stride_x, stride_y, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n_cols
    x = tl.load(x_ptr + row * stride_x + offsets, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * stride_y + offsets, y, mask=mask)


def kernel(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    y = torch.empty_like(x)
    _softmax_row[(m,)](x, y, x.stride(0), y.stride(0), n, BLOCK=triton.next_power_of_2(n))
    return y
