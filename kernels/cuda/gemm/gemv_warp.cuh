// Device pieces shared by the decode GEMVs (gemv.cu) and their RMSNorm-fused twins (gemv_norm.cu):
// one warp owns one output column (a row of w) and streams it in 16-byte loads that bypass L1,
// kUnroll loads per lane in flight; x's M rows are read in 16-byte vectors either from global
// memory through the read-only path (gemv.cu) or from shared memory (gemv_norm.cu, where the
// block staged the normalized rows). The same partition of k and the same order of sums in both,
// so equal inputs give bitwise-equal outputs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/core/element.cuh"
#include "kernels/cuda/core/pdl.cuh"

namespace vlm::cuda::gemv_detail {

constexpr int kWarps = 8, kThreads = 32 * kWarps, kUnroll = 4;

// 16 bytes of w, bypassing L1 (read once), through the read-only path.
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

__device__ __forceinline__ float2 pair_f32(uint32_t v, __nv_bfloat16) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
}
__device__ __forceinline__ float2 pair_f32(uint32_t v, __half) {
  return __half22float2(*reinterpret_cast<const __half2*>(&v));
}

// acc += w . x over 8 elements (k in order).
template <class T>
__device__ __forceinline__ float dot8(const uint4& w, const uint4& x, float acc) {
  const uint32_t wv[4] = {w.x, w.y, w.z, w.w}, xv[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = pair_f32(wv[i], T{}), b = pair_f32(xv[i], T{});
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
  }
  return acc;
}

// The sum over the warp (xor butterfly: every lane gets the same value; block_reduce.cuh's
// block_sum starts with the same steps).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// acc[r][m] = sum over the warp of w_r . x_m, for R rows of w (w[r]: K8 16-byte vectors each) and
// the M rows of x ([M, K8] vectors: global memory, or shared memory when kSharedX); lane j takes
// vectors j, j + 32, ... with kUnroll loads of each row in flight.
template <class T, int M, int R, bool kSharedX = false>
__device__ __forceinline__ void warp_dot(const uint4* __restrict__ x, const uint4* const (&w)[R], int K8, int lane,
                                         float (&acc)[R][M]) {
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.f;
  for (int base = lane; base < K8; base += 32 * kUnroll) {
    uint4 wv[R][kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * 32;
#pragma unroll
      for (int r = 0; r < R; ++r) wv[r][u] = i < K8 ? load_stream(w[r] + i) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
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

// silu(round_dt(g)) * round_dt(u), as ops_cuda's silu_mul computes it on the stored gate/up.
template <class T>
__device__ __forceinline__ float silu_mul_of(float g, float u) {
  g = to_f32(from_f32<T>(g));
  u = to_f32(from_f32<T>(u));
  return g / (1.0f + expf(-g)) * u;  // as ops_cuda's silu_mul
}

// The epilogues: lane m < M writes row m's output of column n (y [M, N]: + bias[n], + y when
// accumulating) or of gate/up pair i (out [M, I] = silu_mul(gate + bias[i], up + bias[I + i])).
template <class TO, int M>
__device__ __forceinline__ void store_column(const float (&acc)[1][M], int lane, const TO* bias, bool accumulate,
                                             TO* y, int N, int n) {
#pragma unroll
  for (int m = 0; m < M; ++m) {
    if (m != lane) continue;
    float v = acc[0][m];
    if (bias) v += to_f32(bias[n]);
    if (accumulate) v += to_f32(y[int64_t(m) * N + n]);
    y[int64_t(m) * N + n] = from_f32<TO>(v);
  }
}

template <class T, int M>
__device__ __forceinline__ void store_silu_mul(const float (&acc)[2][M], int lane, const T* bias, T* out, int I,
                                               int i) {
#pragma unroll
  for (int m = 0; m < M; ++m) {
    if (m != lane) continue;
    const float g = acc[0][m] + (bias ? to_f32(bias[i]) : 0.f), u = acc[1][m] + (bias ? to_f32(bias[I + i]) : 0.f);
    out[int64_t(m) * I + i] = from_f32<T>(silu_mul_of<T>(g, u));
  }
}

// Calls f(std::integral_constant<int, M>) for M in [1, 4] (kGemvMaxRows).
template <class F>
void dispatch_rows(int64_t M, F&& f) {
  switch (M) {
    case 1: f(std::integral_constant<int, 1>{}); return;
    case 2: f(std::integral_constant<int, 2>{}); return;
    case 3: f(std::integral_constant<int, 3>{}); return;
    case 4: f(std::integral_constant<int, 4>{}); return;
    default: precondition_failed("gemv: more rows than kGemvMaxRows");
  }
}

template <class F>
void dispatch_half(DType dt, F&& f) {
  if (dt == DType::BF16) f(__nv_bfloat16{});
  else if (dt == DType::F16) f(__half{});
  else unsupported_dtype(dt);
}

inline unsigned blocks(int64_t n, int per) { return static_cast<unsigned>((n + per - 1) / per); }

// PDL launches (pdl.h): the bytes of each of the `rows` rows of w (row_bytes each) that the first
// pass of warps reads and asks L2 for before pdl_wait: pdl_prefetch_bytes() spread over them, at
// most a row, in 16-byte units. 0 when this launch is not a PDL one.
inline int pdl_row_prefetch(int64_t rows, int64_t row_bytes) {
  if (!pdl_active()) return 0;
  const int64_t b = std::min(row_bytes, pdl_prefetch_bytes() / std::max<int64_t>(rows, 1));
  return static_cast<int>(b / 16 * 16);
}

}  // namespace vlm::cuda::gemv_detail
