"""WRONG on purpose: GELU with a wrong constant (0.7 instead of 1/sqrt(2))."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _linear_gelu(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        # W is (N, K) row-major: element (k, n) of W^T sits at n * K + k
        w = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & (rk[:, None] < K), other=0.0)
        acc += tl.dot(a, w, input_precision="ieee")
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    y = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7))
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], y, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)  # same parameters, same creation order as Model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        m, k = x.shape
        n = self.linear.out_features
        y = torch.empty((m, n), device=x.device, dtype=x.dtype)
        grid = (triton.cdiv(m, 32), triton.cdiv(n, 32))
        _linear_gelu[grid](x, self.linear.weight, self.linear.bias, y, m, n, k, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
        return y
