// Device and host pieces of the decode GEMVs' v2 form (gemv.h, VLM_CUDA_GEMV=v2), shared by gemv.cu
// and gemv_norm.cu: the weight stream with kStreamLoads independent 16-byte loads per lane in
// flight over the warp's R rows (ld.global.cs, evict-first: the weights are read once), all issued
// before the FMAs, and the resident-capacity grid. (8 per row at R = 2, gate/up, took ~90-112
// registers and so half the resident warps for the same bytes in flight per SM; not kept.) A lane takes the same k vectors (lane, lane + 32, ...) in the same
// order as warp_dot (gemv_warp.cuh), and the warp reduces with the same butterfly, so for equal
// inputs warp_dot_stream's sums are bitwise warp_dot's: only the number of loads in flight and
// the cache hint differ. Kept apart from gemv_warp.cuh, which many other kernels include.
#pragma once

#include "kernels/cuda/gemm/gemv_norm_stage.cuh"
#include "kernels/cuda/gemm/gemv_warp.cuh"

namespace vlm::cuda::gemv_detail {

constexpr int kStreamLoads = 8;  // 16-byte loads of w per lane in flight (v1: kUnroll = 4 per row)

// 16 bytes of w, streaming (evict-first in L1 and L2).
__device__ __forceinline__ uint4 load_cs(const uint4* p) { return __ldcs(p); }

// As warp_dot (acc[r][m] = sum over the warp of w_r . x_m), with kStreamLoads / R loads of each of
// the R rows in flight per lane.
template <class T, int M, int R, bool kSharedX = false>
__device__ __forceinline__ void warp_dot_stream(const uint4* __restrict__ x, const uint4* const (&w)[R], int K8,
                                                int lane, float (&acc)[R][M]) {
  constexpr int U = kStreamLoads / R;
  static_assert(U >= 1 && U * R == kStreamLoads, "R divides kStreamLoads");
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.f;
  for (int base = lane; base < K8; base += 32 * U) {
    uint4 wv[R][U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = base + u * 32;
#pragma unroll
      for (int r = 0; r < R; ++r) wv[r][u] = i < K8 ? load_cs(w[r] + i) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = base + u * 32;
      if (i >= K8) break;
#pragma unroll
      for (int m = 0; m < M; ++m) {
        uint4 xv;
        if constexpr (kSharedX) xv = x[int64_t(m) * K8 + i];
        else xv = __ldg(x + int64_t(m) * K8 + i);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r][m] = dot8<T>(wv[r][u], xv, acc[r][m]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = warp_sum(acc[r][m]);
}

// The norm forms' head prefetch in v2: prefetch < 0 (plain launches) the warp's whole first batch
// of the row (kStreamLoads / R x 32 vectors) asked of L2 in one bulk prefetch before the norm's
// reduction; prefetch > 0 (PDL launches, before the wait) that many bytes; 0 none.
template <int R>
__device__ __forceinline__ void prefetch_head_stream(const uint4* row, int K8, int lane, int prefetch) {
  if (lane != 0 || prefetch == 0) return;
  const int first = std::min(K8, 32 * (kStreamLoads / R));
  prefetch_l2(row, prefetch > 0 ? static_cast<uint32_t>(prefetch) : static_cast<uint32_t>(first) * 16u);
}

// The resident capacity of `kernel` (kThreads per block, `smem` dynamic bytes): SMs x blocks per
// SM from the occupancy calculator, at most max_blocks (then every block has work).
inline unsigned resident_grid(const void* kernel, size_t smem, int64_t max_blocks) {
  const int64_t resident = int64_t(sm_count()) * resident_per_sm(kernel, smem);
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(resident, max_blocks)));
}

}  // namespace vlm::cuda::gemv_detail
