"""GQA paged decode (32 query heads, 4 KV heads, head dim 128, page size 1) in Triton.

One program per (request, KV head): it loads the 8 query heads that share the KV head (padded to 16 rows for
tl.dot), walks the request's pages in blocks of BLOCK_N, gathers K and V rows through kv_indices, and keeps an
online softmax in base 2 (logits pre-multiplied by sm_scale * log2(e)), so lse = m + log2(l) is the base-2 LSE.
Under the CPU interpreter (tensors on the CPU) bf16 tl.dot is wrong (numpy has no bf16), so the dots there run on
float32 copies of the same bf16 values (UPCAST); on a GPU Q.K runs on bf16 with float32 accumulation. P.V always
uses float32 probabilities (tf32 on a GPU): rounding them to bf16 can cost 2 ulp of the bf16 output.
"""

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def _gqa_decode_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    indptr_ptr,
    indices_ptr,
    out_ptr,
    lse_ptr,
    scale_log2,
    stride_qb,
    stride_qh,
    stride_kp,
    stride_kh,
    stride_vp,
    stride_vh,
    stride_ob,
    stride_oh,
    stride_lb,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    UPCAST: tl.constexpr,
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    rows = tl.arange(0, GROUP_PAD)
    dims = tl.arange(0, HEAD_DIM)
    row_ok = rows < GROUP
    heads = kvh * GROUP + rows
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + dims[None, :], mask=row_ok[:, None], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    start = tl.load(indptr_ptr + b)
    end = tl.load(indptr_ptr + b + 1)
    m = tl.full([GROUP_PAD], -float("inf"), tl.float32)
    l = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
    for pos in range(start, end, BLOCK_N):
        offs = pos + tl.arange(0, BLOCK_N)
        ok = offs < end
        page = tl.load(indices_ptr + offs, mask=ok, other=0).to(tl.int64)
        k = tl.load(k_ptr + page[:, None] * stride_kp + kvh * stride_kh + dims[None, :], mask=ok[:, None], other=0.0)
        v = tl.load(v_ptr + page[:, None] * stride_vp + kvh * stride_vh + dims[None, :], mask=ok[:, None], other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
        s = tl.dot(q, tl.trans(k)) * scale_log2  # [GROUP_PAD, BLOCK_N], base-2 logits
        s = tl.where(ok[None, :], s, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        # P @ V with float32 probabilities (tf32 on a GPU): rounding p to bf16 costs up to 2 ulp of the output.
        acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32))
        m = m_new
    out = acc / l[:, None]
    tl.store(
        out_ptr + b * stride_ob + heads[:, None] * stride_oh + dims[None, :], out.to(tl.bfloat16), mask=row_ok[:, None]
    )
    tl.store(lse_ptr + b * stride_lb + heads, m + tl.log2(l), mask=row_ok)


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    batch, num_qo_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    q = q.contiguous()
    output = torch.empty((batch, num_qo_heads, head_dim), dtype=torch.bfloat16, device=q.device)
    lse = torch.empty((batch, num_qo_heads), dtype=torch.float32, device=q.device)
    k2 = k_cache.reshape(k_cache.shape[0], num_kv_heads, head_dim)  # page size 1: [pages, kv_heads, dim]
    v2 = v_cache.reshape(v_cache.shape[0], num_kv_heads, head_dim)
    _gqa_decode_kernel[(batch, num_kv_heads)](
        q,
        k2,
        v2,
        kv_indptr,
        kv_indices,
        output,
        lse,
        float(sm_scale) * LOG2E,
        q.stride(0),
        q.stride(1),
        k2.stride(0),
        k2.stride(1),
        v2.stride(0),
        v2.stride(1),
        output.stride(0),
        output.stride(1),
        lse.stride(0),
        GROUP=num_qo_heads // num_kv_heads,
        GROUP_PAD=16,
        HEAD_DIM=head_dim,
        BLOCK_N=64,
        UPCAST=q.device.type == "cpu",
    )
    return output, lse
