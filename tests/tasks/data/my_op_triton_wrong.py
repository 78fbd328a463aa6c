"""WRONG on purpose for examples/my_op.py: the tanh approximation of GELU (off by up to ~1e-3)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _gelu_mul(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    tanh = 2.0 / (1.0 + tl.exp(-2.0 * inner)) - 1.0
    tl.store(out_ptr + offs, 0.5 * x * (1.0 + tanh) * y, mask=mask)


def kernel(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    _gelu_mul[(triton.cdiv(n, 1024),)](x.contiguous(), y.contiguous(), out, n, BLOCK=1024)
    return out
