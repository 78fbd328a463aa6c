"""Honest TriMul: GPU MODE's helper modules, a weight table keyed by the weights' identity, a full-mask fast path.

Patterns seen in real leaderboard files: (a) ``from task import input_t, output_t, TestSpec`` and ``from utils
import DisableCuDNNTF32`` (GPU MODE's problem folder provides both; so does ksearch); (o) an import left over and never
used (``import subprocess``); (p) fused fp16 weights kept in a module-level table keyed by the weights' identity
(``data_ptr()`` of the weight tensors and the config's sizes), computed from the weights alone, the table holding the
source tensors so that a reused address cannot bring back stale weights; (q) a fast path that
skips the mask multiply when the mask is all ones (the leaderboard's benchmarks always are), checked with one host
sync; (m) a ``__main__`` benchmark that times with ``torch.cuda.Event`` and calls ``nvidia-smi`` (never runs on
import).

Steps: a Triton row LayerNorm (used over C and over H), one fp16 GEMM for the five projections, a Triton kernel for
the gates and the optional mask, an fp16 batched GEMM for the triangle contraction, then gate and output projection.

CPU interpreter: yes (Triton and torch only).
"""

import subprocess  # used only by the __main__ benchmark below

import torch
import triton
import triton.language as tl
from task import TestSpec, input_t, output_t  # noqa: F401 - GPU MODE's template header
from utils import DisableCuDNNTF32

EPS = 1e-5
_FUSED: dict = {}


@triton.jit
def _row_norm(x_ptr, w_ptr, b_ptr, y_ptr, rows, cols, eps, BR: tl.constexpr, BC: tl.constexpr):
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    c = tl.arange(0, BC)
    ok = (r < rows)[:, None] & (c < cols)[None, :]
    offsets = r.to(tl.int64)[:, None] * cols + c[None, :]
    v = tl.load(x_ptr + offsets, mask=ok, other=0.0).to(tl.float32)
    mean = tl.sum(v, axis=1) / cols
    d = tl.where(ok, v - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=1) / cols + eps)
    w = tl.load(w_ptr + c, mask=c < cols, other=0.0)
    b = tl.load(b_ptr + c, mask=c < cols, other=0.0)
    tl.store(y_ptr + offsets, (d * rstd[:, None] * w[None, :] + b[None, :]).to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _gate(p_ptr, mask_ptr, lr_ptr, og_ptr, M, NN, H, inv_n, HAS_MASK: tl.constexpr, BM: tl.constexpr,
          BH: tl.constexpr):
    """p: [M, 5H] fp32 projections; lr: [2, B, H, N*N] fp16 channel-major left (divided by N, so the fp16
    contraction cannot overflow) and right; og: [M, H] output gate."""
    r = tl.program_id(0) * BM + tl.arange(0, BM)
    h = tl.arange(0, BH)
    ok = (r < M)[:, None] & (h < H)[None, :]
    r64 = r.to(tl.int64)
    row = p_ptr + r64[:, None] * (5 * H) + h[None, :]
    left = tl.load(row, mask=ok, other=0.0) * tl.sigmoid(tl.load(row + 2 * H, mask=ok, other=0.0)) * inv_n
    right = tl.load(row + H, mask=ok, other=0.0) * tl.sigmoid(tl.load(row + 3 * H, mask=ok, other=0.0))
    if HAS_MASK:
        m = tl.load(mask_ptr + r, mask=r < M, other=0.0)
        left = left * m[:, None]
        right = right * m[:, None]
    b = r64 // NN
    q = r64 - b * NN
    dst = b[:, None] * (H * NN) + h[None, :].to(tl.int64) * NN + q[:, None]
    tl.store(lr_ptr + dst, left.to(tl.float16), mask=ok)
    tl.store(lr_ptr + M * H + dst, right.to(tl.float16), mask=ok)
    tl.store(og_ptr + r64[:, None] * H + h[None, :], tl.sigmoid(tl.load(row + 4 * H, mask=ok, other=0.0)), mask=ok)


_NAMES = ("left_proj.weight", "right_proj.weight", "left_gate.weight", "right_gate.weight", "out_gate.weight",
          "to_out.weight")


def _fused_weights(weights: dict, dim: int, hidden: int) -> tuple:
    """fp16 [C, 5H] projections and [H, C] output projection, built once per set of weights. The table keeps the
    source tensors and checks them by identity: a freed tensor's address can come back holding new weights."""
    key = (weights["left_proj.weight"].data_ptr(), weights["to_out.weight"].data_ptr(), dim, hidden)
    sources = tuple(weights[k] for k in _NAMES)
    hit = _FUSED.get(key)
    if hit is None or not all(a is b for a, b in zip(hit[0], sources)):
        stacked = torch.cat(sources[:5], dim=0)
        _FUSED[key] = (sources, (stacked.t().contiguous().half(), weights["to_out.weight"].t().contiguous().half()))
    return _FUSED[key][1]


def _norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype, eps: float = EPS) -> torch.Tensor:
    rows, cols = x.numel() // x.shape[-1], x.shape[-1]
    y = torch.empty(x.shape, device=x.device, dtype=out_dtype)
    br = 16
    _row_norm[(triton.cdiv(rows, br),)](x, w, b, y, rows, cols, eps, BR=br, BC=triton.next_power_of_2(cols))
    return y


def custom_kernel(data: input_t) -> output_t:
    x, mask, weights, config = data
    B, N, _, C = x.shape
    H = config["hidden_dim"]
    M, NN = B * N * N, N * N
    w5t, wout_t = _fused_weights(weights, config["dim"], H)
    with DisableCuDNNTF32():
        xn = _norm(x.contiguous(), weights["norm.weight"], weights["norm.bias"], torch.float16)
        p = (xn.view(M, C) @ w5t).float()
        lr = torch.empty((2, B, H, NN), device=x.device, dtype=torch.float16)
        og = torch.empty((M, H), device=x.device, dtype=torch.float32)
        full = bool((mask.min() >= 1).item())  # the leaderboard's masks are all ones: skip the multiply then
        bm = 32
        _gate[(triton.cdiv(M, bm),)](p, mask.contiguous().float(), lr, og, M, NN, H, 1.0 / N, HAS_MASK=not full,
                                     BM=bm, BH=triton.next_power_of_2(H))  # fmt: skip
        prod = torch.bmm(lr[0].view(B * H, N, N), lr[1].view(B * H, N, N).transpose(1, 2))  # [B*H, N, N]
        prod = prod.view(B, H, NN).transpose(1, 2).contiguous()  # [B, N*N, H]
        # prod is the contraction divided by N: the LayerNorm over H is the same with eps divided by N^2
        normed = _norm(prod, weights["to_out_norm.weight"], weights["to_out_norm.bias"], torch.float32, EPS / (N * N))
        gated = normed * og.view(B, NN, H)
        return (gated.half() @ wout_t).float().view(B, N, N, C)


if __name__ == "__main__":
    from utils import set_seed

    set_seed(0)
    spec = TestSpec(seqlen=256, bs=2, dim=128, hiddendim=128, seed=0, nomask=True, distribution="normal")
    subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv"], check=False)
    n, b, c, h = spec["seqlen"], spec["bs"], spec["dim"], spec["hiddendim"]
    names = ["norm.weight", "norm.bias", "left_proj.weight", "right_proj.weight", "left_gate.weight",
             "right_gate.weight", "out_gate.weight", "to_out_norm.weight", "to_out_norm.bias", "to_out.weight"]
    shapes = [(c,), (c,), (h, c), (h, c), (h, c), (h, c), (h, c), (h,), (h,), (c, h)]
    w = {k: torch.randn(s, device="cuda") / 10 for k, s in zip(names, shapes)}
    args = (torch.randn(b, n, n, c, device="cuda"), torch.ones(b, n, n, device="cuda"), w, {"dim": c, "hidden_dim": h})
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    custom_kernel(args)
    start.record()
    custom_kernel(args)
    end.record()
    torch.cuda.synchronize()
    print(f"{start.elapsed_time(end):.3f} ms")
