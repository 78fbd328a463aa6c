# GPU MODE submission for trimul, produced by ksearch 0.1.0
# run trimul-record (task trimul, model interactive, device cuda)
# candidate sha256-v1:a33f5c42692e2e80eb1cd58310c14eb275c332550244dd513f0256cbea291bc0
# evaluation: passed 18/18 configs, 0.9335 ms on NVIDIA H200
# timing method: gpumode-benchmark

import torch
import triton
import triton.language as tl


@triton.jit
def _layernorm_fp16(x_ptr, w_ptr, b_ptr, y_ptr, M, C, eps, BM: tl.constexpr, BC: tl.constexpr):
    # LayerNorm over C for BM rows; writes fp16 rows for the projection GEMM.
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.arange(0, BC)
    rmask = rows < M
    cmask = cols < C
    m2 = rmask[:, None] & cmask[None, :]
    x = tl.load(x_ptr + rows[:, None] * C + cols[None, :], mask=m2, other=0.0)
    mean = tl.sum(x, axis=1) / C
    d = tl.where(m2, x - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=1) / C + eps)
    g = tl.load(w_ptr + cols, mask=cmask, other=0.0)
    b = tl.load(b_ptr + cols, mask=cmask, other=0.0)
    y = d * rstd[:, None] * g[None, :] + b[None, :]
    tl.store(y_ptr + rows[:, None] * C + cols[None, :], y.to(tl.float16), mask=m2)


@triton.jit
def _pack_weights(p0, p1, p2, p3, p4, out_ptr, HC, BLOCK: tl.constexpr):
    # The five [H, C] fp32 projection weights into one fp16 [5H, C] buffer, in one launch: program (i, j) copies
    # block j of weight i.
    i = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = offs < HC
    if i == 0:
        v = tl.load(p0 + offs, mask=m)
    elif i == 1:
        v = tl.load(p1 + offs, mask=m)
    elif i == 2:
        v = tl.load(p2 + offs, mask=m)
    elif i == 3:
        v = tl.load(p3 + offs, mask=m)
    else:
        v = tl.load(p4 + offs, mask=m)
    tl.store(out_ptr + i * HC + offs, v.to(tl.float16), mask=m)


@triton.jit
def _proj_gate_gemm(xn_ptr, w_ptr, mask_ptr, left_ptr, right_ptr, og_ptr, M, NN, C,
                    H: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # xn: [M, C] fp16; w: [5H, C] fp16 = [left_proj; right_proj; left_gate; right_gate; out_gate].
    # Each program: BM rows x two BN-wide column blocks whose product the epilogue needs together:
    # kinds 0..H/BN-1: (left_proj, left_gate) of one h block; next H/BN: (right_proj, right_gate); last 2: out_gate halves
    # (H = 2 BN). The programs of one row block are adjacent, so xn's tile is read from HBM once.
    KINDS: tl.constexpr = 2 * (H // BN) + 1
    pid = tl.program_id(0)
    kind = pid % KINDS
    pid_m = pid // KINDS
    rows = pid_m * BM + tl.arange(0, BM)
    rmask = rows < M
    ns = tl.arange(0, BN)
    ks = tl.arange(0, BK)
    if kind < H // BN:
        wa = kind * BN
        wb = 2 * H + kind * BN
    elif kind < 2 * (H // BN):
        wa = H + (kind - H // BN) * BN
        wb = 3 * H + (kind - H // BN) * BN
    else:
        wa = 4 * H
        wb = 4 * H + BN
    acc_a = tl.zeros([BM, BN], dtype=tl.float32)
    acc_b = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, C, BK):
        kk = k0 + ks
        kmask = kk < C
        a = tl.load(xn_ptr + rows[:, None] * C + kk[None, :], mask=rmask[:, None] & kmask[None, :], other=0.0)
        wta = tl.load(w_ptr + (wa + ns)[None, :] * C + kk[:, None], mask=kmask[:, None], other=0.0)
        wtb = tl.load(w_ptr + (wb + ns)[None, :] * C + kk[:, None], mask=kmask[:, None], other=0.0)
        acc_a = tl.dot(a, wta, acc_a)
        acc_b = tl.dot(a, wtb, acc_b)
    m2 = rmask[:, None]
    if kind < 2 * (H // BN):
        mk = tl.load(mask_ptr + rows, mask=rmask, other=0.0)
        val = acc_a * tl.sigmoid(acc_b) * mk[:, None]
        b = rows // NN
        r = rows - b * NN
        h = (kind % (H // BN)) * BN + ns
        dst = b[:, None] * (H * NN) + h[None, :] * NN + r[:, None]
        if kind < H // BN:
            tl.store(left_ptr + dst, val.to(tl.float16), mask=m2)
        else:
            tl.store(right_ptr + dst, val.to(tl.float16), mask=m2)
    else:
        tl.store(og_ptr + rows[:, None] * H + ns[None, :], tl.sigmoid(acc_a).to(tl.float16), mask=m2)
        tl.store(og_ptr + rows[:, None] * H + BN + ns[None, :], tl.sigmoid(acc_b).to(tl.float16), mask=m2)


@triton.jit
def _ln_proj_rows(x_ptr, nw_ptr, nb_ptr, w_ptr, mask_ptr, left_ptr, right_ptr, og_ptr, M, NN, C, eps,
                  H: tl.constexpr, BM: tl.constexpr, BC: tl.constexpr, BN: tl.constexpr):
    # The whole input side for C <= BC: BM rows of x read once as fp32, LayerNorm in registers, the fp16 tile kept
    # in the program and multiplied by all five [H, C] weights (w: [5H, C] fp16 = [lp; rp; lg; rg; og]); one dot
    # with K = BC each. left/right stored as [B, H, N, N] fp16, the out gate as [M, H] fp16 (as the GEMM did).
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.arange(0, BC)
    rmask = rows < M
    cmask = cols < C
    m2 = rmask[:, None] & cmask[None, :]
    x = tl.load(x_ptr + rows[:, None] * C + cols[None, :], mask=m2, other=0.0)
    mean = tl.sum(x, axis=1) / C
    d = tl.where(m2, x - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=1) / C + eps)
    g = tl.load(nw_ptr + cols, mask=cmask, other=0.0)
    bb = tl.load(nb_ptr + cols, mask=cmask, other=0.0)
    xn = (d * rstd[:, None] * g[None, :] + bb[None, :]).to(tl.float16)  # padded columns stay 0
    mk = tl.load(mask_ptr + rows, mask=rmask, other=0.0)
    b = rows // NN
    r = rows - b * NN
    ns = tl.arange(0, BN)
    rm2 = rmask[:, None]
    wk = cols[:, None]
    for hb in tl.static_range(H // BN):
        h = hb * BN + ns
        dst = b[:, None] * (H * NN) + h[None, :] * NN + r[:, None]
        w_lp = tl.load(w_ptr + h[None, :] * C + wk, mask=cmask[:, None], other=0.0)  # [BC, BN]
        w_lg = tl.load(w_ptr + (2 * H + h)[None, :] * C + wk, mask=cmask[:, None], other=0.0)
        lv = tl.dot(xn, w_lp) * tl.sigmoid(tl.dot(xn, w_lg)) * mk[:, None]
        tl.store(left_ptr + dst, lv.to(tl.float16), mask=rm2)
        w_rp = tl.load(w_ptr + (H + h)[None, :] * C + wk, mask=cmask[:, None], other=0.0)
        w_rg = tl.load(w_ptr + (3 * H + h)[None, :] * C + wk, mask=cmask[:, None], other=0.0)
        rv = tl.dot(xn, w_rp) * tl.sigmoid(tl.dot(xn, w_rg)) * mk[:, None]
        tl.store(right_ptr + dst, rv.to(tl.float16), mask=rm2)
        w_og = tl.load(w_ptr + (4 * H + h)[None, :] * C + wk, mask=cmask[:, None], other=0.0)
        gv = tl.sigmoid(tl.dot(xn, w_og))
        tl.store(og_ptr + rows[:, None] * H + h[None, :], gv.to(tl.float16), mask=rm2)


@triton.jit
def _out_norm_gate_proj(o_ptr, og_ptr, nw_ptr, nb_ptr, wo_ptr, y_ptr, M, NN, C, eps,
                        H: tl.constexpr, BM: tl.constexpr, BC: tl.constexpr):
    # o: [B, H, N, N] fp16 (the contraction's output). Per row m = (b, i, j): LayerNorm over H, times the out gate,
    # then @ to_out.weight^T ([H, C], fp16) -> y [M, C] fp32.
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    hs = tl.arange(0, H)
    rmask = rows < M
    m2 = rmask[:, None]
    b = rows // NN
    r = rows - b * NN
    o = tl.load(o_ptr + b[:, None] * (H * NN) + hs[None, :] * NN + r[:, None], mask=m2, other=0.0).to(tl.float32)
    mean = tl.sum(o, axis=1) / H
    d = o - mean[:, None]
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=1) / H + eps)
    g = tl.load(nw_ptr + hs)
    bb = tl.load(nb_ptr + hs)
    og = tl.load(og_ptr + rows[:, None] * H + hs[None, :], mask=m2, other=0.0).to(tl.float32)
    a = ((d * rstd[:, None] * g[None, :] + bb[None, :]) * og).to(tl.float16)
    for c0 in range(0, C, BC):
        cs = c0 + tl.arange(0, BC)
        cmask = cs < C
        w = tl.load(wo_ptr + hs[:, None] + cs[None, :] * H, mask=cmask[None, :], other=0.0)  # [H, BC]
        acc = tl.dot(a, w)
        tl.store(y_ptr + rows[:, None] * C + cs[None, :], acc, mask=m2 & cmask[None, :])


def custom_kernel(data):
    x, mask, w, cfg = data
    B, N, _, C = x.shape
    H = w["left_proj.weight"].shape[0]
    M, NN = B * N * N, N * N
    dev = x.device
    x2 = x.reshape(M, C)
    wcat = torch.empty(5 * H, C, device=dev, dtype=torch.float16)
    _pack_weights[(5, triton.cdiv(H * C, 4096))](w["left_proj.weight"], w["right_proj.weight"], w["left_gate.weight"],
                                                  w["right_gate.weight"], w["out_gate.weight"], wcat, H * C,
                                                  BLOCK=4096)  # one launch instead of a concatenation and a cast
    left = torch.empty(B, H, N, N, device=dev, dtype=torch.float16)
    right = torch.empty_like(left)
    og = torch.empty(M, H, device=dev, dtype=torch.float16)
    BC = triton.next_power_of_2(C)
    if BC <= 128:
        # LayerNorm + five projections + gating in one kernel; xn never goes to HBM
        _ln_proj_rows[(triton.cdiv(M, 64),)](x2, w["norm.weight"], w["norm.bias"], wcat, mask.reshape(M), left, right,
                                             og, M, NN, C, 1e-5, H=H, BM=64, BC=BC, BN=64, num_warps=4,
                                             num_stages=1)
    else:
        xn = torch.empty(M, C, device=dev, dtype=torch.float16)
        bm_ln = max(1, min(16, 8192 // BC))
        _layernorm_fp16[(triton.cdiv(M, bm_ln),)](x2, w["norm.weight"], w["norm.bias"], xn, M, C, 1e-5, BM=bm_ln,
                                                  BC=BC)
        BN = H // 2
        kinds = 2 * (H // BN) + 1
        _proj_gate_gemm[(triton.cdiv(M, 128) * kinds,)](xn, wcat, mask.reshape(M), left, right, og, M, NN, C, H=H,
                                                        BM=128, BN=BN, BK=64, num_warps=8, num_stages=3)
    # out[b, h, i, j] = sum_k left[b, h, i, k] * right[b, h, j, k]
    o = torch.bmm(left.view(B * H, N, N), right.view(B * H, N, N).transpose(1, 2))
    y = torch.empty(M, C, device=dev, dtype=torch.float32)
    wo = w["to_out.weight"].to(torch.float16)  # [C, H]; a fp32 tile in the kernel would cost it occupancy
    # 64 rows, 4 warps, 1 stage: 32 KB of shared memory per block, more blocks per SM
    _out_norm_gate_proj[(triton.cdiv(M, 64),)](o, og, w["to_out_norm.weight"], w["to_out_norm.bias"], wo, y, M, NN, C,
                                               1e-5, H=H, BM=64, BC=64, num_warps=4, num_stages=1)
    return y.view(B, N, N, C)
