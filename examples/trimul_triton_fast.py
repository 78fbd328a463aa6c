"""TriMul (outgoing Triangle Multiplicative Update) in Triton + one cuBLAS batched GEMM, GPU MODE format.

Written for ksearch as a realistic *fast* submission: fp16 tensor cores for every matrix product, fp32 for every
statistic and accumulator, four launches (plus a one-launch weight preparation).

Design (B batches, N tokens, C channels, H = 128 hidden, M = B*N*N rows):

1. ``_ln_kernel``: LayerNorm(C) without its affine part, x_n = (x - mean) * rstd in fp16 [M, C_pad]. Each program
   reads its rows of x exactly once, whole (a [rows, next_pow2(C)] register tile), and takes exact two-pass fp32
   statistics in registers. Bandwidth-bound: 6 bytes moved per element.
2. ``_proj_gemm_kernel``: the five C -> H maps as one fp16 GEMM against the stacked weights [C_pad, 5H]
   (LayerNorm gamma folded into the weight rows, beta folded into an fp32 bias W @ beta), fp32 accumulation,
   Triton-pipelined K loop (wgmma on Hopper). Program (t, row block): tiles t < 4 are [proj | gate] column pairs
   of 64 h each for left or right, whose epilogue writes (proj + b) * sigmoid(gate + b) * mask in fp16 to the
   channel-major [2, B, H, N, N] buffer the contraction wants (left times 1/N); tiles 4-5 are the out-gate,
   sigmoid, fp16 [M, H].
   Why not one fused LayerNorm + projection kernel: three fused variants were written and measured on an H100
   (C = 384, N = 1024: 2.5-3.1 ms for the stage). A fused program serialises a device-memory phase (its x rows)
   with a tensor-core phase (640 output columns per row), needs the x rows twice (statistics, then x_n; the
   second read missed L2 at C = 384) and cannot keep both phases busy with one or two programs per SM. Split,
   each kernel runs near its own limit: LayerNorm at ~3.05 TB/s (0.79 ms) plus the GEMM (1.33 ms) = 2.1 ms.
3. The N^3 contraction out[b, h] = left[b, h] @ right[b, h]^T: ``torch.bmm`` on [B*H, N, N] fp16 views (cuBLAS,
   fp32 accumulation, fp16 out [B, H, N, N]). The 1/N folded into left keeps out well inside fp16's range (its
   coherent part grows like N: ~6e4 at N = 1024, C = 768 unscaled); LayerNorm over H is scale invariant, so the
   epilogue only uses eps / N^2.
4. ``_epilogue_kernel``: loads the [BLOCK_M, H] slab of out from the channel-major layout (coalesced along j),
   LayerNorm(H) with fp32 statistics, affine, times the fp16 out-gate, cast to fp16, times Wout^T [H, C] (fp16,
   fp32 accumulation) in column chunks of <= 128, writing float32 y [B, N, N, C].

Weight preparation (``_prep_kernel``: stacking and reordering, gamma folding, beta bias, fp16 casts, zero
padding) is one small launch; its result is cached in the weights dict under "_ksearch_fast_wprep", checked
against the identity and version of every source tensor, so a caller that reuses one dict skips it. Every output
element is computed on every call. Configurations are fixed per kernel (no autotuning).

fp16: x_n (|x_n| <= sqrt(C)), the stacked projection weights, left, right, the out-gate, the contraction output,
the epilogue's normalised-and-gated operand and Wout. fp32: x, every LayerNorm statistic, every accumulator,
biases, sigmoid inputs, y. Measured error vs a float64 reference: max |err| 1e-3..5e-3, relative Frobenius ~4e-4,
at most 0.15 of the tolerance (2e-2 + 2e-2 |ref|), normal and Cauchy inputs, with and without masks.

Cost on an H100 (3.35 TB/s peak, ~3.05 TB/s reached by the LayerNorm kernel; 989 TFLOP/s dense fp16) for the
largest timed shape B=1, N=1024, C=384 (M = 1,048,576 rows), counted / measured (do_bench medians):
  - LayerNorm: read x 1.61 GB + write x_n 0.81 GB = 2.42 GB -> 0.79 ms at 3.05 TB/s; measured 0.79 ms.
  - projections: read x_n 0.81 GB + write left/right 0.54 GB + gate 0.27 GB = 1.61 GB -> 0.53 ms;
    5 * 2 * M * C * H = 0.52 TFLOP -> 0.53 ms at peak; measured 1.33 ms (~390 TFLOP/s, the weakest stage).
  - contraction: 2 * B * H * N^3 = 0.275 TFLOP -> 0.28 ms at peak; 0.8 GB; measured 0.42 ms in cuBLAS.
  - epilogue: read out 0.27 GB + gate 0.27 GB, write y 1.61 GB = 2.15 GB -> 0.70 ms; 2 * M * H * C = 0.10 TFLOP;
    measured 0.78 ms.
  Sum measured ~3.3 ms. Floor for the shape: x in and y out (fp32) are 3.2 GB = 1.05 ms by themselves and the
  1.0 TFLOP of products 1.0 ms at peak; with this design's fp16 intermediates (x_n, left, right, gate, out:
  3.5 GB more traffic) the bytes alone are 6.7 GB = 2.2 ms.
  Timed shapes, measured on one H100 (do_bench median, ms): (2,256,128) 0.31, (1,768,128) 1.05, (2,256,384) 0.43,
  (1,512,128) 0.48, (1,1024,128) 1.92, (1,768,384) 1.84, (1,1024,384) 3.31; geometric mean ~0.97 ms.
"""

import torch
import triton
import triton.language as tl

EPS = 1e-5  # both LayerNorms
_PREP_KEY = "_ksearch_fast_wprep"
_SRC_KEYS = (
    "norm.weight", "norm.bias", "left_proj.weight", "left_gate.weight", "right_proj.weight", "right_gate.weight",
    "out_gate.weight", "to_out_norm.weight", "to_out_norm.bias", "to_out.weight",
)


@triton.jit
def _ln_kernel(x_ptr, xn_ptr, M, M_ALLOC, C, eps,
               C_PAD: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_M: tl.constexpr):
    """LayerNorm(C) without its affine part (folded into the weights): xn = (x - mean) * rstd in fp16,
    [M_ALLOC, C_PAD], zero in the padding columns and in the rows past M (the GEMM's last blocks read them).
    Each row is read once, whole (BLOCK_C >= C), and its statistics are exact two-pass fp32 in registers."""
    pid = tl.program_id(0)
    rows = pid.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cs = tl.arange(0, BLOCK_C)
    c_ok = (cs < C)[None, :]
    x = tl.load(x_ptr + rows[:, None] * C + cs[None, :], mask=(rows < M)[:, None] & c_ok, other=0.0)
    mean = tl.sum(x, axis=1) / C
    d = tl.where(c_ok, x - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=1) / C + eps)
    xn = (d * rstd[:, None]).to(tl.float16)
    tl.store(xn_ptr + rows[:, None] * C_PAD + cs[None, :], xn, mask=(rows < M_ALLOC)[:, None] & (cs < C_PAD)[None, :])


@triton.jit
def _proj_gemm_kernel(
    xn_ptr, mask_ptr, w_ptr, bias_ptr, lr_ptr, gate_ptr,
    NN, LR_HALF, n_pblk, left_scale,
    H: tl.constexpr, BLOCK_M: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, C_PAD: tl.constexpr,
):
    """Program (t, row block). Tiles t < 2*NT (NT = H / BN): gated, [proj | gate] columns of width BN for left
    (t < NT) or right, h-range (t mod NT) * BN; they write (proj + b) * sigmoid(gate + b) * mask (* 1/N for left)
    in fp16 to the channel-major [2, B, H, N*N] buffer. Tiles t >= 2*NT: the out-gate, sigmoid, fp16 [M, H].
    K loop over x_n and the stacked weights with Triton's pipelined loads, fp32 accumulation."""
    t = tl.program_id(0)
    blk = tl.program_id(1)
    NT: tl.constexpr = H // BN
    W_COLS: tl.constexpr = 5 * H
    b = blk // n_pblk
    p = (blk - b * n_pblk) * BLOCK_M + tl.arange(0, BLOCK_M)  # position i*N + k inside batch b
    row_ok = p < NN
    rows = b.to(tl.int64) * NN + p
    ks = tl.arange(0, BK)
    ns = tl.arange(0, BN)
    a_tile = xn_ptr + rows[:, None] * C_PAD + ks[None, :]
    w_tile = w_ptr + ks[:, None] * W_COLS + ns[None, :]
    ok = row_ok[:, None]
    if t < 2 * NT:
        col = t * (2 * BN)
        acc_p = tl.zeros([BLOCK_M, BN], dtype=tl.float32)
        acc_g = tl.zeros([BLOCK_M, BN], dtype=tl.float32)
        for k0 in range(0, C_PAD, BK):
            a = tl.load(a_tile + k0)
            acc_p = tl.dot(a, tl.load(w_tile + k0 * W_COLS + col), acc_p)
            acc_g = tl.dot(a, tl.load(w_tile + k0 * W_COLS + col + BN), acc_g)
        bp = tl.load(bias_ptr + col + ns)
        bg = tl.load(bias_ptr + col + BN + ns)
        side = t // NT
        h0 = (t - side * NT) * BN
        m_row = tl.load(mask_ptr + rows, mask=row_ok, other=0.0)
        scale = m_row * tl.where(side == 0, left_scale, 1.0)
        val = (acc_p + bp[None, :]) * tl.sigmoid(acc_g + bg[None, :]) * scale[:, None]
        off = side.to(tl.int64) * LR_HALF + (b.to(tl.int64) * H * NN + p)[:, None] + ((h0 + ns) * NN)[None, :]
        tl.store(lr_ptr + off, val.to(tl.float16), mask=ok)
    else:
        h0 = (t - 2 * NT) * BN
        col = 4 * H + h0
        acc = tl.zeros([BLOCK_M, BN], dtype=tl.float32)
        for k0 in range(0, C_PAD, BK):
            acc = tl.dot(tl.load(a_tile + k0), tl.load(w_tile + k0 * W_COLS + col), acc)
        bo = tl.load(bias_ptr + col + ns)
        gt = tl.sigmoid(acc + bo[None, :])
        tl.store(gate_ptr + rows[:, None] * H + (h0 + ns)[None, :], gt.to(tl.float16), mask=ok)


@triton.jit
def _epilogue_kernel(
    o_ptr, gate_ptr, lnw_ptr, lnb_ptr, wo_ptr, y_ptr,
    NN, C, eps,
    H: tl.constexpr, WO_COLS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr, EVEN_C: tl.constexpr,
):
    pid_p = tl.program_id(0)
    b = tl.program_id(1)
    p = pid_p * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = p < NN
    rows = b.to(tl.int64) * NN + p
    hs = tl.arange(0, H)
    ok = row_ok[:, None]

    # out slab [BLOCK_M, H] from channel-major [B, H, N*N]: contiguous along the rows for each h.
    o = tl.load(o_ptr + (b.to(tl.int64) * H * NN + p)[:, None] + (hs * NN)[None, :], mask=ok, other=0.0)
    o = o.to(tl.float32)
    mean = tl.sum(o, axis=1) / H
    d = o - mean[:, None]
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=1) / H + eps)
    lw = tl.load(lnw_ptr + hs)
    lb = tl.load(lnb_ptr + hs)
    g = tl.load(gate_ptr + rows[:, None] * H + hs[None, :], mask=ok, other=0.0).to(tl.float32)
    a = ((d * rstd[:, None]) * lw[None, :] + lb[None, :]) * g
    a = a.to(tl.float16)

    cs = tl.arange(0, BLOCK_C)
    y_rows = y_ptr + rows[:, None] * C
    w_rows = wo_ptr + hs[:, None] * WO_COLS
    for c0 in range(0, C, BLOCK_C):
        cc = c0 + cs
        w = tl.load(w_rows + cc[None, :])  # Wout^T, zero-padded to WO_COLS columns
        y = tl.dot(a, w)
        if EVEN_C:
            tl.store(y_rows + cc[None, :], y, mask=ok)
        else:
            tl.store(y_rows + cc[None, :], y, mask=ok & (cc < C)[None, :])


@triton.jit
def _prep_kernel(
    wl_ptr, wlg_ptr, wr_ptr, wrg_ptr, wog_ptr, gamma_ptr, beta_ptr, wo_ptr, wcat_ptr, bias_ptr, wo_t_ptr,
    C, C_PAD, CO_PAD,
    H: tl.constexpr, BN: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """Weight preparation in one launch. Programs 0-4: source matrix j in (Wl, Wlg, Wr, Wrg, Wog), [H, C] fp32 ->
    columns of wcat [C_PAD, 5H] fp16 (times gamma, zero rows past C) and bias[col] = W[h] . beta in fp32.
    Program 5: wo_t [H, CO_PAD] = Wout^T in fp16, zero columns past C."""
    j = tl.program_id(0)
    hs = tl.arange(0, H)
    ks = tl.arange(0, BLOCK_K)
    if j < 5:
        if j == 0:
            src = wl_ptr
        elif j == 1:
            src = wlg_ptr
        elif j == 2:
            src = wr_ptr
        elif j == 3:
            src = wrg_ptr
        else:
            src = wog_ptr
        NT: tl.constexpr = H // BN
        side = j // 2
        kind = j - 2 * side
        col = (side * NT + hs // BN) * (2 * BN) + kind * BN + hs % BN
        col = tl.where(j == 4, 4 * H + hs, col)
        bacc = tl.zeros([H], dtype=tl.float32)
        for k0 in range(0, C_PAD, BLOCK_K):
            kk = k0 + ks
            k_ok = kk < C
            w = tl.load(src + hs[:, None] * C + kk[None, :], mask=k_ok[None, :], other=0.0)  # [H, BLOCK_K]
            g = tl.load(gamma_ptr + kk, mask=k_ok, other=0.0)
            be = tl.load(beta_ptr + kk, mask=k_ok, other=0.0)
            bacc += tl.sum(w * be[None, :], axis=1)
            tl.store(wcat_ptr + kk[None, :] * (5 * H) + col[:, None], (w * g[None, :]).to(tl.float16),
                     mask=(kk < C_PAD)[None, :])
        tl.store(bias_ptr + col, bacc)
    else:
        for k0 in range(0, CO_PAD, BLOCK_K):
            kk = k0 + ks
            k_ok = kk < C
            wo = tl.load(wo_ptr + kk[None, :] * H + hs[:, None], mask=k_ok[None, :], other=0.0)  # Wout[c, h]
            tl.store(wo_t_ptr + hs[:, None] * CO_PAD + kk[None, :], wo.to(tl.float16), mask=(kk < CO_PAD)[None, :])


def _prepare_weights(weights, bn, c_pad, block_c):
    """Stacked, gamma-folded fp16 projection weights [NCH*KC, 5H] (columns: per h-range of BN, [proj | gate] for
    left then right, then the out-gate), fp32 bias W @ beta in the same column order, fp16 Wout^T [H, C_pad],
    built by one launch of _prep_kernel; cached in the weights dict, keyed on the identity and version of each
    source tensor, so a caller that reuses the dict skips even that launch."""
    src = tuple(weights[k] for k in _SRC_KEYS)
    tag = (bn, c_pad, block_c) + tuple((id(t), t._version) for t in src)
    hit = weights.get(_PREP_KEY)
    if hit is not None and hit[0] == tag and all(a is b for a, b in zip(hit[1], src)):
        return hit[2]
    f32 = [t if (t.dtype == torch.float32 and t.is_contiguous()) else t.float().contiguous() for t in src]
    gamma, beta, wl, wlg, wr, wrg, wog, lnw_o, lnb_o, wo = f32
    h, c = wl.shape
    dev = wl.device
    co_pad = triton.cdiv(c, block_c) * block_c
    wcat = torch.empty((c_pad, 5 * h), dtype=torch.float16, device=dev)
    bias = torch.empty((5 * h,), dtype=torch.float32, device=dev)
    wo_t = torch.empty((h, co_pad), dtype=torch.float16, device=dev)
    _prep_kernel[(6,)](
        wl, wlg, wr, wrg, wog, gamma, beta, wo, wcat, bias, wo_t,
        c, c_pad, co_pad,
        H=h, BN=bn, BLOCK_K=32, num_warps=4,
    )
    prep = (wcat, bias, wo_t, lnw_o, lnb_o)
    weights[_PREP_KEY] = (tag, src, prep)
    return prep


# LayerNorm kernel: (elements per program, num_warps); projection GEMM: (BLOCK_M, BN, BK, num_warps, num_stages);
# epilogue: (BLOCK_M, num_warps, num_stages). H is 128 in every GPU MODE shape.
_LN_CFG = (8192, 8)
_GEMM_CFG = (128, 64, 64, 8, 3)
_EPI_CFG = (64, 4, 1)


def _c_pad(c, bk):
    """Columns of x_n (and rows of the stacked weights): C rounded up to the GEMM's K block."""
    return triton.cdiv(c, bk) * bk


def _gemm_bk(c, cfg):
    return min(cfg[2], max(16, triton.next_power_of_2(c)))


def _launch_proj(x2, m1, prep, B, N, C, H, ln_cfg=None, gemm_cfg=None):
    """Stage 1: LayerNorm -> x_n fp16 [M, C_PAD]; projection GEMMs with fused bias, gates and mask -> left and
    right in one fp16 buffer [2, B, H, N, N] (left pre-divided by N) and the out-gate fp16 [B*N*N, H]."""
    wcat, bias = prep[0], prep[1]
    elems, lnw = ln_cfg or _LN_CFG
    gbm, bn, _, gnw, gns = gemm_cfg or _GEMM_CFG
    bk = _gemm_bk(C, gemm_cfg or _GEMM_CFG)
    NN = N * N
    M = B * NN
    dev = x2.device
    c_pad = wcat.shape[0]
    m_alloc = M + gbm  # the GEMM's last row block of each batch may run past M
    xn = torch.empty((m_alloc, c_pad), dtype=torch.float16, device=dev)
    block_c = triton.next_power_of_2(c_pad)
    lbm = max(1, elems // block_c)
    _ln_kernel[(triton.cdiv(m_alloc, lbm),)](
        x2, xn, M, m_alloc, C, EPS, C_PAD=c_pad, BLOCK_C=block_c, BLOCK_M=lbm, num_warps=lnw,
    )
    lr = torch.empty((2, B, H, N, N), dtype=torch.float16, device=dev)
    gate = torch.empty((M, H), dtype=torch.float16, device=dev)
    n_pblk = triton.cdiv(NN, gbm)
    _proj_gemm_kernel[(3 * (H // bn), B * n_pblk)](
        xn, m1, wcat, bias, lr, gate, NN, B * H * NN, n_pblk, 1.0 / N,
        H=H, BLOCK_M=gbm, BN=bn, BK=bk, C_PAD=c_pad, num_warps=gnw, num_stages=gns,
    )
    return lr, gate


def _contract(lr, B, N, H):
    """Stage 2: out[b*H + h] = left[b, h] @ right[b, h]^T (already divided by N through left), fp16 out."""
    return torch.bmm(lr[0].view(B * H, N, N), lr[1].view(B * H, N, N).transpose(1, 2))


def _launch_epilogue(out, gate, prep, B, N, C, H, cfg=None):
    """Stage 3: LayerNorm(H) * gate, then the H -> C projection -> float32 y [B, N, N, C]."""
    wo_t, lnw_o, lnb_o = prep[2], prep[3], prep[4]
    ebm, enw, ens = cfg or _EPI_CFG
    block_c = _block_c(C)
    NN = N * N
    y = torch.empty((B, N, N, C), dtype=torch.float32, device=out.device)
    _epilogue_kernel[(triton.cdiv(NN, ebm), B)](
        out, gate, lnw_o, lnb_o, wo_t, y,
        NN, C, EPS / (float(N) * float(N)),
        H=H, WO_COLS=wo_t.shape[1], BLOCK_M=ebm, BLOCK_C=block_c, EVEN_C=(C % block_c == 0),
        num_warps=enw, num_stages=ens,
    )
    return y


def _block_c(c):
    return min(128, max(16, triton.next_power_of_2(c)))


def _prep_for(weights, C, H, gemm_cfg=None):
    cfg = gemm_cfg or _GEMM_CFG
    bk = _gemm_bk(C, cfg)
    return _prepare_weights(weights, cfg[1], _c_pad(C, bk), _block_c(C))


def custom_kernel(data):
    x, mask, weights, config = data
    B, N, _, C = x.shape
    H = weights["left_proj.weight"].shape[0]
    x2 = x if x.is_contiguous() else x.contiguous()
    m1 = mask if (mask.dtype == torch.float32 and mask.is_contiguous()) else mask.to(torch.float32).contiguous()
    prep = _prep_for(weights, C, H)
    lr, gate = _launch_proj(x2, m1, prep, B, N, C, H)
    out = _contract(lr, B, N, H)
    return _launch_epilogue(out, gate, prep, B, N, C, H)
