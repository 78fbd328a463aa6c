"""MLA paged decode (16 heads, 512-dim latent + 64-dim rotary, page size 1) in Triton.

One program per request: the 16 query heads form the rows of both tl.dot operands (q_nope [16, 512], q_pe [16, 64]);
the request's pages are walked in blocks of BLOCK_N, gathering rows of the latent cache (keys and values at once)
and the rotary cache through kv_indices; online softmax in base 2, so lse = m + log2(l) is the base-2 LSE. Under
the CPU interpreter (tensors on the CPU) Q.K runs on float32 copies (bf16 tl.dot is wrong there); P.V always
uses float32 probabilities (tf32 on a GPU).
"""

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def _mla_decode_kernel(
    qn_ptr,
    qp_ptr,
    ckv_ptr,
    kpe_ptr,
    indptr_ptr,
    indices_ptr,
    out_ptr,
    lse_ptr,
    scale_log2,
    stride_qnb,
    stride_qnh,
    stride_qpb,
    stride_qph,
    stride_ckv,
    stride_kpe,
    stride_ob,
    stride_oh,
    stride_lb,
    HEADS: tl.constexpr,
    D_CKV: tl.constexpr,
    D_KPE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    UPCAST: tl.constexpr,
):
    b = tl.program_id(0)
    heads = tl.arange(0, HEADS)
    dc = tl.arange(0, D_CKV)
    dp = tl.arange(0, D_KPE)
    qn = tl.load(qn_ptr + b * stride_qnb + heads[:, None] * stride_qnh + dc[None, :])
    qp = tl.load(qp_ptr + b * stride_qpb + heads[:, None] * stride_qph + dp[None, :])
    if UPCAST:
        qn = qn.to(tl.float32)
        qp = qp.to(tl.float32)
    start = tl.load(indptr_ptr + b)
    end = tl.load(indptr_ptr + b + 1)
    m = tl.full([HEADS], -float("inf"), tl.float32)
    l = tl.zeros([HEADS], tl.float32)
    acc = tl.zeros([HEADS, D_CKV], tl.float32)
    for pos in range(start, end, BLOCK_N):
        offs = pos + tl.arange(0, BLOCK_N)
        ok = offs < end
        page = tl.load(indices_ptr + offs, mask=ok, other=0).to(tl.int64)
        kc = tl.load(ckv_ptr + page[:, None] * stride_ckv + dc[None, :], mask=ok[:, None], other=0.0)
        kp = tl.load(kpe_ptr + page[:, None] * stride_kpe + dp[None, :], mask=ok[:, None], other=0.0)
        if UPCAST:
            kc = kc.to(tl.float32)
            kp = kp.to(tl.float32)
        s = (tl.dot(qn, tl.trans(kc)) + tl.dot(qp, tl.trans(kp))) * scale_log2  # [HEADS, BLOCK_N], base 2
        s = tl.where(ok[None, :], s, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        # P @ V with float32 probabilities (tf32 on a GPU): rounding p to bf16 costs up to 2 ulp of the output.
        acc = acc * alpha[:, None] + tl.dot(p, kc.to(tl.float32))
        m = m_new
    out = acc / l[:, None]
    tl.store(out_ptr + b * stride_ob + heads[:, None] * stride_oh + dc[None, :], out.to(tl.bfloat16))
    tl.store(lse_ptr + b * stride_lb + heads, m + tl.log2(l))


def run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale):
    batch, heads, d_ckv = q_nope.shape
    d_kpe = q_pe.shape[-1]
    output = torch.empty((batch, heads, d_ckv), dtype=torch.bfloat16, device=q_nope.device)
    lse = torch.empty((batch, heads), dtype=torch.float32, device=q_nope.device)
    ckv = ckv_cache.reshape(ckv_cache.shape[0], d_ckv)  # page size 1: one row per page
    kpe = kpe_cache.reshape(kpe_cache.shape[0], d_kpe)
    qn, qp = q_nope.contiguous(), q_pe.contiguous()
    _mla_decode_kernel[(batch,)](
        qn,
        qp,
        ckv,
        kpe,
        kv_indptr,
        kv_indices,
        output,
        lse,
        float(sm_scale) * LOG2E,
        qn.stride(0),
        qn.stride(1),
        qp.stride(0),
        qp.stride(1),
        ckv.stride(0),
        kpe.stride(0),
        output.stride(0),
        output.stride(1),
        lse.stride(0),
        HEADS=heads,
        D_CKV=d_ckv,
        D_KPE=d_kpe,
        BLOCK_N=32,
        UPCAST=q_nope.device.type == "cpu",
    )
    return output, lse
