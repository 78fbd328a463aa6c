"""Honest TriMul: derived weights cached in the weights dict it was given, fused Triton LayerNorm + projections.

Patterns: (d) the fp16 concatenated/transposed projection weights are built once and kept in ``weights`` under
constant string keys (``weights["_w5t"]``, ``weights["_wout_t"]``), never keyed by a tensor's identity or content,
and the output is computed afresh on every call; (l) a PyTorch fp16 matmul for the triangle contraction, with
``@torch.inference_mode()`` on the entry point.

Three steps: a Triton kernel (grid axis 1 picks left, right or the output gate) normalises x over C and projects it
with ``tl.dot``; torch multiplies the channel-major left/right halves; a Triton epilogue normalises over H, gates
and projects back to C.

CPU interpreter: yes (Triton and torch only).
"""

import torch
import triton
import triton.language as tl

EPS = 1e-5


@triton.jit
def _norm_project(x_ptr, lnw_ptr, lnb_ptr, w5t_ptr, mask_ptr, lr_ptr, og_ptr,
                  M, NN, C, H, eps,
                  BM: tl.constexpr, BK: tl.constexpr, BH: tl.constexpr):
    pid = tl.program_id(0)
    which = tl.program_id(1)  # 0: left, 1: right, 2: output gate
    rows = pid * BM + tl.arange(0, BM)
    rmask = rows < M
    rows64 = rows.to(tl.int64)
    kk = tl.arange(0, BK)
    hh = tl.arange(0, BH)
    hmask = hh < H

    total = tl.zeros([BM], dtype=tl.float32)
    for k0 in range(0, C, BK):
        km = (k0 + kk) < C
        v = tl.load(x_ptr + rows64[:, None] * C + (k0 + kk)[None, :], mask=rmask[:, None] & km[None, :], other=0.0)
        total += tl.sum(v, axis=1)
    mean = total / C
    sq = tl.zeros([BM], dtype=tl.float32)
    for k0 in range(0, C, BK):
        km = (k0 + kk) < C
        v = tl.load(x_ptr + rows64[:, None] * C + (k0 + kk)[None, :], mask=rmask[:, None] & km[None, :], other=0.0)
        d = tl.where(km[None, :], v - mean[:, None], 0.0)
        sq += tl.sum(d * d, axis=1)
    rstd = 1.0 / tl.sqrt(sq / C + eps)

    # columns of w5t ([C, 5H]): left_proj | right_proj | left_gate | right_gate | out_gate
    proj_col = tl.minimum(which, 1) * H
    gate_col = tl.where(which < 2, 2 + which, 4) * H
    acc_p = tl.zeros([BM, BH], dtype=tl.float32)
    acc_g = tl.zeros([BM, BH], dtype=tl.float32)
    for k0 in range(0, C, BK):
        km = (k0 + kk) < C
        v = tl.load(x_ptr + rows64[:, None] * C + (k0 + kk)[None, :], mask=rmask[:, None] & km[None, :], other=0.0)
        g = tl.load(lnw_ptr + k0 + kk, mask=km, other=0.0)
        b = tl.load(lnb_ptr + k0 + kk, mask=km, other=0.0)
        xn = ((v - mean[:, None]) * rstd[:, None] * g[None, :] + b[None, :])
        xn = tl.where(km[None, :], xn, 0.0).to(tl.float16)
        wmask = km[:, None] & hmask[None, :]
        wrow = (k0 + kk)[:, None] * (5 * H)
        wg = tl.load(w5t_ptr + wrow + gate_col + hh[None, :], mask=wmask, other=0.0)
        acc_g += tl.dot(xn, wg)
        wp = tl.load(w5t_ptr + wrow + proj_col + hh[None, :], mask=wmask, other=0.0)
        acc_p += tl.dot(xn, wp)

    gate = tl.sigmoid(acc_g)
    omask = rmask[:, None] & hmask[None, :]
    if which < 2:
        mk = tl.load(mask_ptr + rows, mask=rmask, other=0.0)
        val = acc_p * gate * mk[:, None]
        # channel-major: lr[which, b, h, p] with row = b * NN + p
        bidx = rows64 // NN
        p = rows64 - bidx * NN
        dst = which.to(tl.int64) * M * H + bidx[:, None] * (H * NN) + hh[None, :].to(tl.int64) * NN + p[:, None]
        tl.store(lr_ptr + dst, val.to(tl.float16), mask=omask)
    else:
        tl.store(og_ptr + rows64[:, None] * H + hh[None, :], gate, mask=omask)


@triton.jit
def _epilogue(prod_ptr, og_ptr, lnw_ptr, lnb_ptr, wout_t_ptr, y_ptr,
              M, NN, C, H, eps,
              BM: tl.constexpr, BH: tl.constexpr, BC: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    rmask = rows < M
    rows64 = rows.to(tl.int64)
    hh = tl.arange(0, BH)
    hmask = hh < H
    m2 = rmask[:, None] & hmask[None, :]
    bidx = rows64 // NN
    p = rows64 - bidx * NN
    v = tl.load(prod_ptr + bidx[:, None] * (H * NN) + hh[None, :].to(tl.int64) * NN + p[:, None],
                mask=m2, other=0.0).to(tl.float32)
    mean = tl.sum(v, axis=1) / H
    d = tl.where(m2, v - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=1) / H + eps)
    g = tl.load(lnw_ptr + hh, mask=hmask, other=0.0)
    b = tl.load(lnb_ptr + hh, mask=hmask, other=0.0)
    og = tl.load(og_ptr + rows64[:, None] * H + hh[None, :], mask=m2, other=0.0)
    a = tl.where(m2, (d * rstd[:, None] * g[None, :] + b[None, :]) * og, 0.0).to(tl.float16)
    cc = tl.arange(0, BC)
    for c0 in range(0, C, BC):
        cm = (c0 + cc) < C
        w = tl.load(wout_t_ptr + hh[:, None] * C + (c0 + cc)[None, :], mask=hmask[:, None] & cm[None, :], other=0.0)
        tl.store(y_ptr + rows64[:, None] * C + (c0 + cc)[None, :], tl.dot(a, w), mask=rmask[:, None] & cm[None, :])


def _prepared(weights: dict) -> dict:
    """fp16 weights in the layouts the kernels read, built on the first call and kept in the weights dict."""
    if "_w5t" not in weights:
        weights["_w5t"] = torch.cat(
            [weights["left_proj.weight"], weights["right_proj.weight"], weights["left_gate.weight"],
             weights["right_gate.weight"], weights["out_gate.weight"]], dim=0,
        ).t().contiguous().half()
    if "_wout_t" not in weights:
        weights["_wout_t"] = weights["to_out.weight"].t().contiguous().half()
    return weights


@torch.inference_mode()
def custom_kernel(data):
    x, mask, weights, config = data
    w = _prepared(weights)
    B, N, _, C = x.shape
    H = w["left_proj.weight"].shape[0]
    M, NN = B * N * N, N * N
    dev = x.device
    bh = max(16, triton.next_power_of_2(H))

    lr = torch.empty((2, B, H, N, N), device=dev, dtype=torch.float16)
    og = torch.empty((M, H), device=dev, dtype=torch.float32)
    bm = 32
    _norm_project[(triton.cdiv(M, bm), 3)](
        x.contiguous(), w["norm.weight"], w["norm.bias"], w["_w5t"], mask.contiguous().float(), lr, og,
        M, NN, C, H, EPS, BM=bm, BK=min(64, max(16, triton.next_power_of_2(C))), BH=bh, num_warps=8,
    )

    prod = torch.matmul(lr[0], lr[1].transpose(-1, -2))  # [B, H, N, N] fp16

    y = torch.empty((B, N, N, C), device=dev, dtype=torch.float32)
    _epilogue[(triton.cdiv(M, bm),)](
        prod, og, w["to_out_norm.weight"], w["to_out_norm.bias"], w["_wout_t"], y,
        M, NN, C, H, EPS, BM=bm, BH=bh, BC=min(64, max(16, triton.next_power_of_2(C))), num_warps=8,
    )
    return y
