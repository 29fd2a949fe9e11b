// Device and host pieces of the RMSNorm-fused decode GEMVs (gemv_norm.cu): the block's staging of
// its normalized rows in shared memory, the weight-head prefetch, and the one-wave grid (moved
// here unchanged from gemv_norm.cu for session 17's decode fusion, since removed).
#pragma once

#include <algorithm>
#include <mutex>
#include <vector>

#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/gemm/gemv_warp.cuh"

namespace vlm::cuda::gemv_detail {

// rms_norm_x4_kernel's block (ops_cuda.cu): 128 threads, thread t summing the float4 groups
// t, t + 128, ... of the row.
constexpr int kNormThreads = 128, kNormWarps = kNormThreads / 32;
static_assert(kNormWarps == 4 && kThreads >= kNormThreads, "the sum tree below is block_sum's over 4 warps");

template <typename T>
struct alignas(4 * sizeof(T)) Vec4 {
  T e[4];
};

// xs[m, :] = round_dt(nw * (x[row(m), :] * inv_m)), inv_m = rsqrt(ss_m / K + eps), for the block's
// M rows; ss_m summed as rms_norm_x4_kernel sums it (per thread fmaf over x, y, z, w of its groups
// t, t + 128, ... in order, then block_sum's trees: the warp's xor butterfly, then
// ((w0 + w2) + (w1 + w3)), which is what block_sum's second butterfly gives over 4 warp partials
// and zeros). Loads go out kLoads at a time (a row of K <= 4096 in one round trip from L2 per
// phase), the sums stay in order. Ends with a barrier.
constexpr int kLoads = 8;
template <class T, int M>
__device__ __forceinline__ void stage_normalized(const float* __restrict__ x, const int32_t* __restrict__ rows,
                                                 const float* __restrict__ nw, float eps, int K, T* xs) {
  __shared__ float part[M][kNormWarps];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, C4 = K / 4;
  const float4* xr[M];
#pragma unroll
  for (int m = 0; m < M; ++m) xr[m] = reinterpret_cast<const float4*>(x + int64_t(rows ? rows[m] : m) * K);
  if (warp < kNormWarps) {
#pragma unroll 1
    for (int m = 0; m < M; ++m) {
      float ss = 0.0f;
      for (int base = tid; base < C4; base += kNormThreads * kLoads) {
        float4 v[kLoads];
#pragma unroll
        for (int j = 0; j < kLoads; ++j) {
          const int c4 = base + kNormThreads * j;
          v[j] = c4 < C4 ? __ldg(xr[m] + c4) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int j = 0; j < kLoads; ++j) {
          if (base + kNormThreads * j >= C4) break;
          ss = fmaf(v[j].x, v[j].x, ss);
          ss = fmaf(v[j].y, v[j].y, ss);
          ss = fmaf(v[j].z, v[j].z, ss);
          ss = fmaf(v[j].w, v[j].w, ss);
        }
      }
      ss = warp_sum(ss);
      if (lane == 0) part[m][warp] = ss;
    }
  }
  __syncthreads();
  const float4* g4 = reinterpret_cast<const float4*>(nw);
  constexpr int kPairs = kLoads / 2;  // x and the norm weight
#pragma unroll 1
  for (int m = 0; m < M; ++m) {
    const float ss = (part[m][0] + part[m][2]) + (part[m][1] + part[m][3]);
    const float inv = rsqrtf(ss / static_cast<float>(K) + eps);
    Vec4<T>* out = reinterpret_cast<Vec4<T>*>(xs + int64_t(m) * K);
    for (int base = tid; base < C4; base += kThreads * kPairs) {
      float4 v[kPairs], g[kPairs];
#pragma unroll
      for (int j = 0; j < kPairs; ++j) {
        const int c4 = base + kThreads * j;
        v[j] = c4 < C4 ? __ldg(xr[m] + c4) : make_float4(0.f, 0.f, 0.f, 0.f);
        g[j] = c4 < C4 ? __ldg(g4 + c4) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int j = 0; j < kPairs; ++j) {
        const int c4 = base + kThreads * j;
        if (c4 >= C4) break;
        Vec4<T> h;
        h.e[0] = from_f32<T>(__fmul_rn(g[j].x, __fmul_rn(v[j].x, inv)));
        h.e[1] = from_f32<T>(__fmul_rn(g[j].y, __fmul_rn(v[j].y, inv)));
        h.e[2] = from_f32<T>(__fmul_rn(g[j].z, __fmul_rn(v[j].z, inv)));
        h.e[3] = from_f32<T>(__fmul_rn(g[j].w, __fmul_rn(v[j].w, inv)));
        out[c4] = h;
      }
    }
  }
  __syncthreads();
}

// Asks L2 for the first kUnroll x 32 vectors of a row of w (the warp's first loads in warp_dot),
// so the weight stream is under way while the block stages its normalized rows. A hint only.
__device__ __forceinline__ void prefetch_row_head(const uint4* row, int K8, int lane) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int i = lane + 32 * u;
    if (i < K8) asm volatile("prefetch.global.L2 [%0];" ::"l"(row + i));
  }
}

// The prefetch of a row's head before the staging: prefetch < 0 (plain launches) the first
// kUnroll x 32 vectors (prefetch_row_head), prefetch > 0 (PDL launches, before the wait) that many
// bytes in one bulk prefetch, 0 none.
__device__ __forceinline__ void prefetch_head(const uint4* row, int K8, int lane, int prefetch) {
  if (prefetch < 0) prefetch_row_head(row, K8, lane);
  else if (prefetch > 0 && lane == 0) prefetch_l2(row, prefetch);
}

// Blocks of `kernel` (with `smem` bytes of dynamic shared memory) resident on one SM, from the
// occupancy calculator, remembered per (kernel, smem): a host-side query, made once per shape.
inline int resident_per_sm(const void* kernel, size_t smem) {
  struct Entry {
    const void* kernel;
    size_t smem;
    int blocks;
  };
  static std::mutex mu;
  static std::vector<Entry> known;
  std::lock_guard<std::mutex> lock(mu);
  for (const Entry& e : known)
    if (e.kernel == kernel && e.smem == smem) return e.blocks;
  int blocks = 0;
  VLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, smem));
  known.push_back({kernel, smem, std::max(blocks, 1)});
  return known.back().blocks;
}

// One wave of blocks: per_block = ceil(groups / resident blocks) column groups each, so
// ceil(groups / per_block) blocks (the last may take fewer groups).
inline unsigned grid_for(const void* kernel, size_t smem, int64_t groups) {
  static const int sms = [] {
    int dev = 0, n = 0;
    VLM_CUDA_CHECK(cudaGetDevice(&dev));
    VLM_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return std::max(n, 1);
  }();
  const int64_t resident = int64_t(sms) * resident_per_sm(kernel, smem);
  const int64_t per_block = (groups + resident - 1) / resident;
  return static_cast<unsigned>((groups + per_block - 1) / per_block);
}

// The kernels' prefetch argument: -1 (the head prefetch of plain launches) or, in a PDL launch,
// pdl_row_prefetch over the rows the resident warps read first.
inline int head_prefetch(int64_t first_rows, int64_t row_bytes) {
  return pdl_active() ? pdl_row_prefetch(first_rows, row_bytes) : -1;
}

}  // namespace vlm::cuda::gemv_detail
