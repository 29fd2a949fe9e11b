// The summing half of the staged down+combine (moe_decode.h 3'. and 3b.), shared by
// moe_pair_down_combine_staged (moe_pair_staged.cu: the rows copied by cp.async) and
// moe_pair_down_combine_bulk (moe_pair_bulk.cu: the rows copied by bulk copies, one mbarrier per
// pair), so that both give moe_pair_down_combine's bits (the same partition and order of every
// sum). Device code only.
#pragma once

#include <cstdint>

#include "kernels/cuda/core/element.cuh"
#include "kernels/cuda/gemm/gemv_warp.cuh"

namespace vlm::cuda::staged_detail {

constexpr int kWarps = 8, kThreads = 32 * kWarps;

// Pair j's R rounded down outputs, by one warp: wj [R][I8] (its down rows c0.. c0 + rows, shared
// memory), xj [I8] (its act row, shared memory); lane l sums 16-byte vectors l, l + 32, ... in
// order, then the xor butterfly; red_j[r] = round_dt(sum) as f32 (what the combine reads).
template <class T, int R>
__device__ __forceinline__ void sum_pair(const uint4* wj, const uint4* xj, int rows, int I8, int lane, float* red_j) {
  float acc[R] = {};
  for (int i = lane; i < I8; i += 32) {
    const uint4 xv = xj[i];
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (r < rows) acc[r] = gemv_detail::dot8<T>(wj[r * I8 + i], xv, acc[r]);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float o = gemv_detail::warp_sum(acc[r]);
    if (lane == 0) red_j[r] = to_f32(from_f32<T>(o));
  }
}

// sum_pair with the act row read from global memory through L2 (xg [I8]: written by other blocks
// of the same launch before a grid barrier, so never through L1): the same sums in the same order.
template <class T, int R>
__device__ __forceinline__ void sum_pair_gx(const uint4* wj, const uint4* xg, int rows, int I8, int lane,
                                            float* red_j) {
  float acc[R] = {};
  for (int i = lane; i < I8; i += 32) {
    const uint4 xv = __ldcg(xg + i);
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (r < rows) acc[r] = gemv_detail::dot8<T>(wj[r * I8 + i], xv, acc[r]);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float o = gemv_detail::warp_sum(acc[r]);
    if (lane == 0) red_j[r] = to_f32(from_f32<T>(o));
  }
}

// y[t, c0 + r] (+)= sum over j ascending of red[j][r] * wt[j], by threads r < rows (after a barrier).
template <int R>
__device__ __forceinline__ void combine(const float (*red)[R], const float* wt, int Kt, int rows, float* y_row,
                                        bool accumulate) {
  if (static_cast<int>(threadIdx.x) < rows) {
    float total = 0.f;
    for (int j = 0; j < Kt; ++j) total += red[j][threadIdx.x] * wt[j];
    float* yr = y_row + threadIdx.x;
    *yr = accumulate ? *yr + total : total;
  }
}

}  // namespace vlm::cuda::staged_detail
