"""Honest Triton matmul for level1/1_Square_matrix_multiplication_ (also any C = A @ B of 2-D float32 matrices, any
strides: bench/kernelbench_level1.py runs it on problems 2, 8 and 13 too): tiles of C accumulated in float32 with
tl.dot in IEEE precision (no TF32), grouped launch order for L2 reuse, three autotuned tile shapes; the tiles' pointers
and masks are computed once and stepped along K (Triton's interpreter runs each block op of the loop in Python).
Expected: passed (every config; its float32 rounding grows with K, as the reference's does)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BM": 128, "BN": 128, "BK": 32}, num_warps=8, num_stages=3),
        triton.Config({"BM": 128, "BN": 64, "BK": 32}, num_warps=4, num_stages=4),
        triton.Config({"BM": 64, "BN": 64, "BK": 32}, num_warps=4, num_stages=4),
    ],
    key=["M", "N", "K"],
)
@triton.jit
def _matmul(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    sam,
    sak,
    sbk,
    sbn,
    scm,
    scn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP: tl.constexpr,
):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BM)
    grid_n = tl.cdiv(N, BN)
    group = pid // (GROUP * grid_n)
    first_m = group * GROUP
    size_m = min(grid_m - first_m, GROUP)
    pid_m = first_m + (pid % (GROUP * grid_n)) % size_m
    pid_n = (pid % (GROUP * grid_n)) // size_m
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b_ptrs = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    a_rows = rm[:, None] < M
    b_cols = rn[None, :] < N
    a_step = BK * sak
    b_step = BK * sbk
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        k_in = rk < K - k
        a = tl.load(a_ptrs, mask=a_rows & k_in[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_in[:, None] & b_cols, other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
        a_ptrs += a_step
        b_ptrs += b_step
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc, mask=a_rows & b_cols)


def triton_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=torch.float32)

    def grid(meta):
        return (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)

    _matmul[grid](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), GROUP=8
    )
    return c


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return triton_matmul(A, B)
