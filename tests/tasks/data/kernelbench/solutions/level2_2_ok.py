"""Correct Triton solution for level2/2_Linear_ReLU_LayerNorm: one program per block of rows holds whole rows, so
the matmul, bias, ReLU and the LayerNorm statistics fuse into one kernel."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _linear_relu_layernorm(x_ptr, w_ptr, b_ptr, g_ptr, beta_ptr, y_ptr, M, N, K, eps,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    n_mask = rn < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=n_mask[None, :] & (rk[:, None] < K), other=0.0)
        acc += tl.dot(a, w, input_precision="ieee")
    h = tl.maximum(acc + tl.load(b_ptr + rn, mask=n_mask, other=0.0)[None, :], 0.0)
    h = tl.where(n_mask[None, :], h, 0.0)
    mean = tl.sum(h, axis=1) / N
    centered = tl.where(n_mask[None, :], h - mean[:, None], 0.0)
    var = tl.sum(centered * centered, axis=1) / N
    normed = centered / tl.sqrt(var + eps)[:, None]
    g = tl.load(g_ptr + rn, mask=n_mask, other=0.0)
    beta = tl.load(beta_ptr + rn, mask=n_mask, other=0.0)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], normed * g[None, :] + beta[None, :],
             mask=(rm[:, None] < M) & n_mask[None, :])


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, eps: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.norm = nn.LayerNorm(out_features, eps=eps)
        with torch.no_grad():  # the same RNG draws as Model, in the same order
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        m, k = x.shape
        n = self.linear.out_features
        y = torch.empty((m, n), device=x.device, dtype=x.dtype)
        block_n = max(16, triton.next_power_of_2(n))
        block_m = 16
        _linear_relu_layernorm[(triton.cdiv(m, block_m),)](
            x, self.linear.weight, self.linear.bias, self.norm.weight, self.norm.bias, y, m, n, k, self.norm.eps,
            BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=32, num_warps=8 if block_n >= 1024 else 4, num_stages=1,
        )
        return y
