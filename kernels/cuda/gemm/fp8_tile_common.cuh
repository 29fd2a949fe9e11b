// Device pieces of fp8_tile_gemm.cu (the FP8 wgmma product of decode steps): the epilogues (scales,
// bias, residual, SiLU·mul, in fp8_gemm_naive's order), the deterministic reduce of split-K partial
// sums and the dispatch over token tiles. Partial sums are [S, M, cols] f32 unscaled (cols = R;
// silu: 2R, gate sums at n, up sums at R + n).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/gemm/gemv_warp.cuh"

namespace vlm::cuda::fp8_tile_detail {

// One output: sum * x_scale[m] * w_scale[n] (+ bias) (+ y), in fp8_gemm_naive's order.
template <class TO>
__device__ __forceinline__ void store_out(float sum, const float* xs, const float* ws, const __nv_bfloat16* bias,
                                          TO* y, bool accumulate, int m, int n, int N) {
  float v = sum * xs[m] * ws[n];
  if (bias) v += __bfloat162float(bias[n]);
  if (accumulate) v += to_f32(y[int64_t(m) * N + n]);
  y[int64_t(m) * N + n] = from_f32<TO>(v);
}

// out[m, i] = silu(round(g)) * round(u): g, u the scaled sums of gate row i and up row R + i.
__device__ __forceinline__ void store_silu(float sg, float su, const float* xs, const float* ws,
                                           const __nv_bfloat16* bias, __nv_bfloat16* out, int m, int i, int R) {
  float g = sg * xs[m] * ws[i], u = su * xs[m] * ws[R + i];
  if (bias) {
    g += __bfloat162float(bias[i]);
    u += __bfloat162float(bias[R + i]);
  }
  out[int64_t(m) * R + i] = from_f32<__nv_bfloat16>(gemv_detail::silu_mul_of<__nv_bfloat16>(g, u));
}

// The splits' partial sums [S, M, cols] added in split order, then the epilogue: one thread per
// output (m, n) of [M, R].
template <bool kSilu, class TO>
__global__ void fp8_tile_reduce_kernel(const float* __restrict__ partial, int S, const float* __restrict__ xs,
                                      const float* __restrict__ ws, const __nv_bfloat16* __restrict__ bias, TO* y,
                                      bool accumulate, int M, int R) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(M) * R) return;
  const int m = static_cast<int>(i / R), n = static_cast<int>(i % R);
  const int cols = (kSilu ? 2 : 1) * R;
  float a = 0.f, b = 0.f;
  for (int sp = 0; sp < S; ++sp) {
    const float* p = partial + (int64_t(sp) * M + m) * cols;
    a += p[n];
    if constexpr (kSilu) b += p[R + n];
  }
  if constexpr (kSilu) store_silu(a, b, xs, ws, bias, reinterpret_cast<__nv_bfloat16*>(y), m, n, R);
  else store_out<TO>(a, xs, ws, bias, y, accumulate, m, n, R);
}

// Calls f(std::integral_constant<int, MT>) for MT = ceil(M / 8) in [1, 8].
template <class F>
void dispatch_tiles(int64_t M, F&& f) {
  switch ((M + 7) / 8) {
    case 1: f(std::integral_constant<int, 1>{}); return;
    case 2: f(std::integral_constant<int, 2>{}); return;
    case 3: f(std::integral_constant<int, 3>{}); return;
    case 4: f(std::integral_constant<int, 4>{}); return;
    case 5: f(std::integral_constant<int, 5>{}); return;
    case 6: f(std::integral_constant<int, 6>{}); return;
    case 7: f(std::integral_constant<int, 7>{}); return;
    case 8: f(std::integral_constant<int, 8>{}); return;
    default: precondition_failed("fp8 tile product: more than 64 rows");
  }
}

}  // namespace vlm::cuda::fp8_tile_detail
