"""TriMul (outgoing Triangle Multiplicative Update) with CUDA kernels, GPU MODE submission format: custom_kernel(data).

Written for ksearch as an honest CUDA baseline (``ksearch eval trimul examples/trimul_cuda.py``, or the first kernel
of ``ksearch run trimul --language cuda --seed-from examples/trimul_cuda.py``): correct, float32 throughout, simple
rather than fast. Four CUDA kernels, built once per process with ``torch.utils.cpp_extension.load_inline``; the two
dense C -> 5H and H -> C projections stay cuBLAS GEMMs through torch (TF32 left at PyTorch's default, off):

1. ``layer_norm_rows``: LayerNorm over C of every (b, i, k) row, one warp per row, float32 statistics.
2. ``gate_to_channel_major``: from the [M, 5H] projections, left/right = proj * mask * sigmoid(gate), written
   channel-major as [B, H, N, N] so the triangle contraction is one N x N x N product per (b, h); the output gate
   sigmoid(og) as [M, H].
3. ``contract``: out[b, h, i, j] = sum_k left[b, h, i, k] * right[b, h, j, k], 64 x 64 tiles through shared memory,
   4 x 4 outputs per thread, float32 FMA (no tensor cores).
4. ``out_norm_gate``: LayerNorm over H of out[b, :, i, j] (read channel-major, written row-major [M, H]), affine,
   times the output gate.
"""

import torch
from torch.utils.cpp_extension import load_inline

_CPP = """
torch::Tensor layer_norm_rows(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps);
std::vector<torch::Tensor> gate_to_channel_major(torch::Tensor proj, torch::Tensor mask, int64_t batch, int64_t n,
                                                 int64_t hidden);
torch::Tensor contract(torch::Tensor left, torch::Tensor right);
torch::Tensor out_norm_gate(torch::Tensor prod, torch::Tensor gate, torch::Tensor weight, torch::Tensor bias,
                            double eps);
"""

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float sigmoid(float v) { return 1.f / (1.f + __expf(-v)); }

// One warp per row of C values: two passes (mean, then variance) over the row held in global memory (L1-resident).
__global__ void layer_norm_rows_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                       const float* __restrict__ b, float* __restrict__ y, long long rows, int c,
                                       float eps) {
  const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const float* xr = x + row * c;
  float sum = 0.f;
  for (int k = lane; k < c; k += 32) sum += xr[k];
  const float mean = warp_sum(sum) / c;
  float var = 0.f;
  for (int k = lane; k < c; k += 32) {
    const float d = xr[k] - mean;
    var += d * d;
  }
  const float rstd = rsqrtf(warp_sum(var) / c + eps);
  float* yr = y + row * c;
  for (int k = lane; k < c; k += 32) yr[k] = (xr[k] - mean) * rstd * w[k] + b[k];
}

// proj: [M, 5H] with M = B*N*N rows (b, i, k) and columns [left_proj | right_proj | left_gate | right_gate | out_gate].
// One thread per (b, h, i, k), k fastest, so the channel-major writes are coalesced.
__global__ void gate_kernel(const float* __restrict__ proj, const float* __restrict__ mask, float* __restrict__ left,
                            float* __restrict__ right, float* __restrict__ out_gate, int batch, int n, int h) {
  const long long total = (long long)batch * h * n * n;
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= total) return;
  const int k = e % n;
  const int i = (e / n) % n;
  const int hh = (e / ((long long)n * n)) % h;
  const int bb = e / ((long long)n * n * h);
  const long long m = ((long long)bb * n + i) * n + k;
  const float* p = proj + m * 5 * h;
  const float mk = mask[m];
  left[e] = p[hh] * mk * sigmoid(p[2 * h + hh]);
  right[e] = p[h + hh] * mk * sigmoid(p[3 * h + hh]);
  out_gate[m * h + hh] = sigmoid(p[4 * h + hh]);
}

// One (b, h) per blockIdx.z: C = A * B^T for A, B of N x N (row i of A = left[b, h, i, :], row j of B = right[b, h, j, :]).
constexpr int TILE = 64, TK = 16;
__global__ void contract_kernel(const float* __restrict__ left, const float* __restrict__ right,
                                float* __restrict__ out, int n) {
  const long long offset = (long long)blockIdx.z * n * n;
  const float* A = left + offset;
  const float* B = right + offset;
  float* C = out + offset;
  const int i0 = blockIdx.y * TILE, j0 = blockIdx.x * TILE;
  __shared__ float As[TK][TILE + 4];
  __shared__ float Bs[TK][TILE + 4];
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < n; k0 += TK) {
    for (int e = tid; e < TILE * TK; e += 256) {
      const int r = e / TK, kk = e % TK, gk = k0 + kk;
      As[kk][r] = (i0 + r < n && gk < n) ? A[(long long)(i0 + r) * n + gk] : 0.f;
      Bs[kk][r] = (j0 + r < n && gk < n) ? B[(long long)(j0 + r) * n + gk] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < TK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        a[r] = As[kk][ty * 4 + r];
        b[r] = Bs[kk][tx * 4 + r];
      }
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int s = 0; s < 4; ++s) acc[r][s] += a[r] * b[s];
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const int i = i0 + ty * 4 + r, j = j0 + tx * 4 + s;
      if (i < n && j < n) C[(long long)i * n + j] = acc[r][s];
    }
}

// One thread per (b, i, j): LayerNorm over H of prod[b, :, i, j] (channel-major: consecutive threads read
// consecutive j), then affine and the output gate, written row-major to y[m, :].
__global__ void out_norm_gate_kernel(const float* __restrict__ prod, const float* __restrict__ gate,
                                     const float* __restrict__ w, const float* __restrict__ b, float* __restrict__ y,
                                     int batch, int n, int h, float eps) {
  const long long m = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long nn = (long long)n * n;
  if (m >= (long long)batch * nn) return;
  const long long bb = m / nn, ij = m % nn;
  const float* p = prod + bb * h * nn + ij;
  float sum = 0.f;
  for (int k = 0; k < h; ++k) sum += p[k * nn];
  const float mean = sum / h;
  float var = 0.f;
  for (int k = 0; k < h; ++k) {
    const float d = p[k * nn] - mean;
    var += d * d;
  }
  const float rstd = rsqrtf(var / h + eps);
  const float* g = gate + m * h;
  float* yr = y + m * h;
  for (int k = 0; k < h; ++k) yr[k] = ((p[k * nn] - mean) * rstd * w[k] + b[k]) * g[k];
}

static void check_f32(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda() && t.scalar_type() == torch::kFloat32 && t.is_contiguous(), name,
              " must be a contiguous CUDA float32 tensor");
}

torch::Tensor layer_norm_rows(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
  check_f32(x, "x"); check_f32(weight, "weight"); check_f32(bias, "bias");
  const int c = x.size(-1);
  const long long rows = x.numel() / c;
  auto y = torch::empty_like(x);
  if (rows == 0) return y;
  const int warps = 8;
  layer_norm_rows_kernel<<<(rows + warps - 1) / warps, 32 * warps>>>(
      x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), rows, c, (float)eps);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}

std::vector<torch::Tensor> gate_to_channel_major(torch::Tensor proj, torch::Tensor mask, int64_t batch, int64_t n,
                                                 int64_t hidden) {
  check_f32(proj, "proj"); check_f32(mask, "mask");
  auto opts = proj.options();
  auto left = torch::empty({batch, hidden, n, n}, opts);
  auto right = torch::empty({batch, hidden, n, n}, opts);
  auto out_gate = torch::empty({batch * n * n, hidden}, opts);
  const long long total = batch * hidden * n * n;
  if (total == 0) return {left, right, out_gate};
  gate_kernel<<<(total + 255) / 256, 256>>>(
      proj.data_ptr<float>(), mask.data_ptr<float>(), left.data_ptr<float>(), right.data_ptr<float>(),
      out_gate.data_ptr<float>(), batch, n, hidden);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {left, right, out_gate};
}

torch::Tensor contract(torch::Tensor left, torch::Tensor right) {
  check_f32(left, "left"); check_f32(right, "right");
  const int n = left.size(-1);
  const long long planes = left.numel() / ((long long)n * n);
  auto out = torch::empty_like(left);
  if (planes == 0 || n == 0) return out;
  const dim3 grid((n + TILE - 1) / TILE, (n + TILE - 1) / TILE, planes);
  contract_kernel<<<grid, 256>>>(left.data_ptr<float>(), right.data_ptr<float>(),
                                                                        out.data_ptr<float>(), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

torch::Tensor out_norm_gate(torch::Tensor prod, torch::Tensor gate, torch::Tensor weight, torch::Tensor bias,
                            double eps) {
  check_f32(prod, "prod"); check_f32(gate, "gate"); check_f32(weight, "weight"); check_f32(bias, "bias");
  const int batch = prod.size(0), h = prod.size(1), n = prod.size(2);
  auto y = torch::empty({(long long)batch * n * n, h}, prod.options());
  const long long rows = (long long)batch * n * n;
  if (rows == 0) return y;
  out_norm_gate_kernel<<<(rows + 127) / 128, 128>>>(
      prod.data_ptr<float>(), gate.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
      y.data_ptr<float>(), batch, n, h, (float)eps);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

_ops = load_inline(
    name="ksearch_trimul_cuda_example",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["layer_norm_rows", "gate_to_channel_major", "contract", "out_norm_gate"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)

EPS = 1e-5


def custom_kernel(data):
    x, mask, w, config = data
    b, n, _, c = x.shape
    h = config["hidden_dim"]
    xn = _ops.layer_norm_rows(x.contiguous(), w["norm.weight"].contiguous(), w["norm.bias"].contiguous(), EPS)
    stacked = torch.cat(
        [w["left_proj.weight"], w["right_proj.weight"], w["left_gate.weight"], w["right_gate.weight"],
         w["out_gate.weight"]],
        dim=0,
    )
    proj = torch.mm(xn.reshape(b * n * n, c), stacked.t()).contiguous()  # [M, 5H], cuBLAS float32
    left, right, out_gate = _ops.gate_to_channel_major(proj, mask.to(torch.float32).contiguous(), b, n, h)
    prod = _ops.contract(left, right)  # [B, H, N, N]
    y = _ops.out_norm_gate(prod, out_gate, w["to_out_norm.weight"].contiguous(), w["to_out_norm.bias"].contiguous(), EPS)
    return torch.mm(y, w["to_out.weight"].t()).reshape(b, n, n, c)
