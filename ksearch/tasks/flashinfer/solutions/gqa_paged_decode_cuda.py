"""GQA paged decode (32 query heads, 4 KV heads, head dim 128, page size 1) in CUDA, built with load_inline.

One thread block per (request, KV head), one warp per query head of the group (8 warps). Each lane owns 4 of the 128
dimensions. A warp walks the request's pages 4 at a time (the 4 gathers of K and V are independent, so they are in
flight together), reduces q.k with warp shuffles and keeps an online softmax in base 2 (q pre-multiplied by
sm_scale * log2(e)), so the LSE it writes is the base-2 LSE the definition asks for. float32 accumulation; the output
is rounded to bf16 once. Needs nvcc (load_inline compiles at import, once per process).
"""

from torch.utils.cpp_extension import load_inline

LOG2E = 1.4426950408889634

_CPP = """
std::vector<torch::Tensor> gqa_decode(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache,
                                      torch::Tensor indptr, torch::Tensor indices, double scale_log2);
"""

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <math_constants.h>

constexpr int HEAD_DIM = 128;
constexpr int PER_LANE = HEAD_DIM / 32;
constexpr int UNROLL = 4;

__device__ __forceinline__ void load4(const __nv_bfloat16* p, float out[PER_LANE]) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);  // 8-byte aligned: rows are 256 bytes, lanes 8 bytes apart
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  out[0] = lo.x; out[1] = lo.y; out[2] = hi.x; out[3] = hi.y;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void gqa_decode_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
                                  const __nv_bfloat16* __restrict__ v_cache, const int* __restrict__ indptr,
                                  const int* __restrict__ indices, __nv_bfloat16* __restrict__ out,
                                  float* __restrict__ lse, float scale_log2, int num_qo_heads, int num_kv_heads) {
  const int b = blockIdx.x, kvh = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int group = num_qo_heads / num_kv_heads;
  if (warp >= group) return;
  const int head = kvh * group + warp;
  const int d0 = lane * PER_LANE;

  float qv[PER_LANE];
  load4(q + ((long long)b * num_qo_heads + head) * HEAD_DIM + d0, qv);
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) qv[i] *= scale_log2;

  const long long page_stride = (long long)num_kv_heads * HEAD_DIM;  // page size 1: one token per page
  const __nv_bfloat16* k_base = k_cache + (long long)kvh * HEAD_DIM + d0;
  const __nv_bfloat16* v_base = v_cache + (long long)kvh * HEAD_DIM + d0;
  const int start = indptr[b], end = indptr[b + 1];

  float m = -CUDART_INF_F, l = 0.f;
  float acc[PER_LANE] = {0.f, 0.f, 0.f, 0.f};
  for (int t = start; t < end; t += UNROLL) {
    long long page[UNROLL];
    float kv[UNROLL][PER_LANE], vv[UNROLL][PER_LANE], s[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) page[u] = (t + u < end) ? (long long)indices[t + u] : -1;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      if (page[u] >= 0) {
        load4(k_base + page[u] * page_stride, kv[u]);
        load4(v_base + page[u] * page_stride, vv[u]);
      } else {
#pragma unroll
        for (int i = 0; i < PER_LANE; ++i) kv[u][i] = vv[u][i] = 0.f;
      }
    }
    float block_max = -CUDART_INF_F;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      float partial = 0.f;
#pragma unroll
      for (int i = 0; i < PER_LANE; ++i) partial += qv[i] * kv[u][i];
      const float total = warp_sum(partial);  // every lane takes part: page[u] is the same across the warp
      s[u] = page[u] >= 0 ? total : -CUDART_INF_F;
      block_max = fmaxf(block_max, s[u]);
    }
    const float m_new = fmaxf(m, block_max);
    const float alpha = exp2f(m - m_new);  // 0 on the first block (m = -inf)
    l *= alpha;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) acc[i] *= alpha;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const float p = page[u] >= 0 ? exp2f(s[u] - m_new) : 0.f;
      l += p;
#pragma unroll
      for (int i = 0; i < PER_LANE; ++i) acc[i] += p * vv[u][i];
    }
    m = m_new;
  }
  const float inv = l > 0.f ? 1.f / l : 0.f;
  __nv_bfloat16* o = out + ((long long)b * num_qo_heads + head) * HEAD_DIM + d0;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) o[i] = __float2bfloat16(acc[i] * inv);
  if (lane == 0) lse[(long long)b * num_qo_heads + head] = l > 0.f ? m + log2f(l) : -CUDART_INF_F;
}

std::vector<torch::Tensor> gqa_decode(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache,
                                      torch::Tensor indptr, torch::Tensor indices, double scale_log2) {
  TORCH_CHECK(q.is_cuda() && q.scalar_type() == torch::kBFloat16, "q must be a CUDA bfloat16 tensor");
  TORCH_CHECK(q.dim() == 3 && q.size(2) == HEAD_DIM, "q must be [batch, num_qo_heads, 128]");
  TORCH_CHECK(k_cache.dim() == 4 && k_cache.size(1) == 1 && k_cache.size(3) == HEAD_DIM,
              "k_cache: [pages, 1, kv, 128]");
  TORCH_CHECK(indptr.scalar_type() == torch::kInt32 && indices.scalar_type() == torch::kInt32, "int32 indices");
  const int batch = q.size(0), num_qo_heads = q.size(1), num_kv_heads = k_cache.size(2);
  TORCH_CHECK(num_qo_heads % num_kv_heads == 0 && num_qo_heads / num_kv_heads <= 32, "unsupported head grouping");
  auto qc = q.contiguous();
  auto kc = k_cache.contiguous();
  auto vc = v_cache.contiguous();
  auto ip = indptr.contiguous();
  auto ix = indices.contiguous();
  auto out = torch::empty({batch, num_qo_heads, HEAD_DIM}, q.options());
  auto lse = torch::empty({batch, num_qo_heads}, q.options().dtype(torch::kFloat32));
  if (batch == 0) return {out, lse};
  const dim3 grid(batch, num_kv_heads);
  const dim3 block(32 * (num_qo_heads / num_kv_heads));
  gqa_decode_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const __nv_bfloat16*>(qc.data_ptr<at::BFloat16>()),
      reinterpret_cast<const __nv_bfloat16*>(kc.data_ptr<at::BFloat16>()),
      reinterpret_cast<const __nv_bfloat16*>(vc.data_ptr<at::BFloat16>()), ip.data_ptr<int>(), ix.data_ptr<int>(),
      reinterpret_cast<__nv_bfloat16*>(out.data_ptr<at::BFloat16>()), lse.data_ptr<float>(), (float)scale_log2,
      num_qo_heads, num_kv_heads);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {out, lse};
}
"""

_module = load_inline(
    name="ksearch_gqa_paged_decode_cuda",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["gqa_decode"],
    extra_cuda_cflags=["-O3", "--use_fast_math"],
    verbose=False,
)


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    output, lse = _module.gqa_decode(q, k_cache, v_cache, kv_indptr, kv_indices, float(sm_scale) * LOG2E)
    return output, lse
