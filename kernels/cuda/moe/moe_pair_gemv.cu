// moe_pair_gate_up and moe_pair_down_combine (moe_decode.h, 2. and 3.): the experts' products of
// a few tokens, one warp per output, each beside its naive reference (one thread per output, k
// ascending).
#include <cstdint>

#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/element.cuh"
#include "kernels/cuda/gemm/gemv_warp.cuh"
#include "kernels/cuda/moe/moe_decode.h"

namespace vlm::cuda {
namespace {

using gemv_detail::dot8;
using gemv_detail::load_stream;
using gemv_detail::silu_mul_of;
using gemv_detail::warp_sum;

constexpr int kPairWarps = 4, kPairThreads = 32 * kPairWarps;  // gate|up
// down: blocks of 2 warps, so the one wave of T = 1 (2,048 warps) spreads evenly: 1,024 blocks at
// ~8 per SM (4-warp blocks: 512 at 3 or 4 per SM, a quarter of the SMs a block short).
constexpr int kDownWarps = 2, kDownThreads = 32 * kDownWarps;
constexpr int kPairGateUpUnroll = 8;  // vectors of the gate row (and of the up row) in flight per lane
constexpr int kPairDownUnroll = 4;    // vectors of each pair's down row in flight per lane
constexpr int kPairDownGroup = 4;     // pairs whose down rows are in flight together

// Warp = output (pair p, column n), p-major so neighbouring warps stream neighbouring rows.
template <class T>
__global__ void __launch_bounds__(kPairThreads)
    pair_gate_up_kernel(const T* __restrict__ h, const T* __restrict__ w, const int32_t* __restrict__ expert, int P,
                        int Kt, int N, int C, T* __restrict__ act) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kPairWarps + threadIdx.x / 32;
  if (item >= static_cast<int64_t>(P) * N) return;
  const int lane = threadIdx.x % 32, p = static_cast<int>(item / N), n = static_cast<int>(item % N);
  const int64_t e = expert[p];
  const int C8 = C / 8;
  const uint4* wg = reinterpret_cast<const uint4*>(w + (e * 2 * N + n) * C);
  const uint4* wu = wg + static_cast<int64_t>(N) * C8;
  const uint4* x = reinterpret_cast<const uint4*>(h + static_cast<int64_t>(p / Kt) * C);
  const uint4 zero = make_uint4(0, 0, 0, 0);
  float g = 0.f, u = 0.f;
  for (int i0 = lane; i0 < C8; i0 += 32 * kPairGateUpUnroll) {
    uint4 gv[kPairGateUpUnroll], uv[kPairGateUpUnroll];
#pragma unroll
    for (int q = 0; q < kPairGateUpUnroll; ++q) {
      const int i = i0 + 32 * q;
      gv[q] = i < C8 ? load_stream(wg + i) : zero;
      uv[q] = i < C8 ? load_stream(wu + i) : zero;
    }
#pragma unroll
    for (int q = 0; q < kPairGateUpUnroll; ++q) {
      const int i = i0 + 32 * q;
      if (i >= C8) break;
      const uint4 xv = __ldg(x + i);
      g = dot8<T>(gv[q], xv, g);
      u = dot8<T>(uv[q], xv, u);
    }
  }
  g = warp_sum(g);
  u = warp_sum(u);
  if (lane == 0) act[static_cast<int64_t>(p) * N + n] = from_f32<T>(silu_mul_of<T>(g, u));
}

// Warp = output (token t, column c): the token's pairs kPairDownGroup at a time, j ascending.
template <class T>
__global__ void __launch_bounds__(kDownThreads)
    pair_down_combine_kernel(const T* __restrict__ act, const T* __restrict__ w, const int32_t* __restrict__ expert,
                             const float* __restrict__ weight, int Tn, int Kt, int C, int I, float* y,
                             bool accumulate) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kDownWarps + threadIdx.x / 32;
  if (item >= static_cast<int64_t>(Tn) * C) return;
  const int lane = threadIdx.x % 32, t = static_cast<int>(item / C), c = static_cast<int>(item % C);
  const int I8 = I / 8;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  float total = 0.f;
  for (int j0 = 0; j0 < Kt; j0 += kPairDownGroup) {
    const uint4* wr[kPairDownGroup];
    const uint4* xr[kPairDownGroup];
#pragma unroll
    for (int q = 0; q < kPairDownGroup; ++q) {
      const int j = j0 + q;
      const int64_t pair = static_cast<int64_t>(t) * Kt + j;
      wr[q] = j < Kt ? reinterpret_cast<const uint4*>(w + (static_cast<int64_t>(expert[pair]) * C + c) * I) : nullptr;
      xr[q] = j < Kt ? reinterpret_cast<const uint4*>(act + pair * I) : nullptr;
    }
    float acc[kPairDownGroup] = {};
    for (int i0 = lane; i0 < I8; i0 += 32 * kPairDownUnroll) {
      uint4 wv[kPairDownUnroll][kPairDownGroup];
#pragma unroll
      for (int u = 0; u < kPairDownUnroll; ++u)
#pragma unroll
        for (int q = 0; q < kPairDownGroup; ++q) {
          const int i = i0 + 32 * u;
          wv[u][q] = i < I8 && wr[q] ? load_stream(wr[q] + i) : zero;
        }
#pragma unroll
      for (int u = 0; u < kPairDownUnroll; ++u) {
        const int i = i0 + 32 * u;
        if (i >= I8) break;
#pragma unroll
        for (int q = 0; q < kPairDownGroup; ++q)
          if (xr[q]) acc[q] = dot8<T>(wv[u][q], __ldg(xr[q] + i), acc[q]);
      }
    }
#pragma unroll
    for (int q = 0; q < kPairDownGroup; ++q) {
      const int j = j0 + q;
      if (j >= Kt) break;
      const float o = to_f32(from_f32<T>(warp_sum(acc[q])));  // the down output as dt, as the combine reads it
      total += o * weight[static_cast<int64_t>(t) * Kt + j];
    }
  }
  if (lane == 0) {
    float* yr = y + static_cast<int64_t>(t) * C + c;
    *yr = accumulate ? *yr + total : total;
  }
}

template <class T>
__global__ void pair_gate_up_naive_kernel(const T* h, const T* w, const int32_t* expert, int P, int Kt, int N, int C,
                                          T* act) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= static_cast<int64_t>(P) * N) return;
  const int p = static_cast<int>(item / N), n = static_cast<int>(item % N);
  const int64_t e = expert[p];
  const T* wg = w + (e * 2 * N + n) * C;
  const T* wu = wg + static_cast<int64_t>(N) * C;
  const T* x = h + static_cast<int64_t>(p / Kt) * C;
  float g = 0.f, u = 0.f;
  for (int k = 0; k < C; ++k) {
    g = fmaf(to_f32(wg[k]), to_f32(x[k]), g);
    u = fmaf(to_f32(wu[k]), to_f32(x[k]), u);
  }
  act[item] = from_f32<T>(silu_mul_of<T>(g, u));
}

template <class T>
__global__ void pair_down_combine_naive_kernel(const T* act, const T* w, const int32_t* expert, const float* weight,
                                               int Tn, int Kt, int C, int I, float* y, bool accumulate) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= static_cast<int64_t>(Tn) * C) return;
  const int t = static_cast<int>(item / C), c = static_cast<int>(item % C);
  float total = 0.f;
  for (int j = 0; j < Kt; ++j) {
    const int64_t pair = static_cast<int64_t>(t) * Kt + j;
    const T* wr = w + (static_cast<int64_t>(expert[pair]) * C + c) * I;
    const T* x = act + pair * I;
    float acc = 0.f;
    for (int k = 0; k < I; ++k) acc = fmaf(to_f32(wr[k]), to_f32(x[k]), acc);
    total += to_f32(from_f32<T>(acc)) * weight[pair];
  }
  y[item] = accumulate ? y[item] + total : total;
}

void check_pairs(int64_t T, int64_t K, int64_t C, int64_t I, DType dt, const void* a, const void* b, const void* c) {
  if (T < 0 || K < 1 || K > kMoeMaxTopK || T * K > (1 << 24) || C > (1 << 20) || I > (1 << 20) ||
      !moe_decode_supported(C, I, dt))
    precondition_failed("moe pair GEMV: T >= 0, 1 <= K <= 32, 16-bit dt, C and I multiples of 8");
  if ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) | reinterpret_cast<uintptr_t>(c)) % 16 != 0)
    precondition_failed("moe pair GEMV: x, weights and act 16-byte aligned");
}

template <class F>
void by_dtype(DType dt, F&& f) {
  if (dt == DType::BF16) f(__nv_bfloat16{});
  else f(__half{});
}

}  // namespace

void moe_pair_gate_up(const void* h, const void* gate_up, const int32_t* expert, DType dt, int64_t T, int64_t K,
                      int64_t I, int64_t C, void* act, cudaStream_t s) {
  check_pairs(T, K, C, I, dt, h, gate_up, act);
  if (T == 0) return;
  const int64_t items = T * K * I;
  by_dtype(dt, [&](auto tag) {
    using Tt = decltype(tag);
    pair_gate_up_kernel<Tt><<<static_cast<unsigned>((items + kPairWarps - 1) / kPairWarps), kPairThreads, 0, s>>>(
        static_cast<const Tt*>(h), static_cast<const Tt*>(gate_up), expert, static_cast<int>(T * K),
        static_cast<int>(K), static_cast<int>(I), static_cast<int>(C), static_cast<Tt*>(act));
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void moe_pair_gate_up_naive(const void* h, const void* gate_up, const int32_t* expert, DType dt, int64_t T, int64_t K,
                            int64_t I, int64_t C, void* act, cudaStream_t s) {
  check_pairs(T, K, C, I, dt, h, gate_up, act);
  if (T == 0) return;
  const int64_t items = T * K * I;
  by_dtype(dt, [&](auto tag) {
    using Tt = decltype(tag);
    pair_gate_up_naive_kernel<Tt><<<static_cast<unsigned>((items + 127) / 128), 128, 0, s>>>(
        static_cast<const Tt*>(h), static_cast<const Tt*>(gate_up), expert, static_cast<int>(T * K),
        static_cast<int>(K), static_cast<int>(I), static_cast<int>(C), static_cast<Tt*>(act));
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void moe_pair_down_combine(const void* act, const void* down, const int32_t* expert, const float* weight, DType dt,
                           int64_t T, int64_t K, int64_t C, int64_t I, float* y, bool accumulate, cudaStream_t s) {
  check_pairs(T, K, C, I, dt, act, down, act);
  if (T == 0) return;
  const int64_t items = T * C;
  by_dtype(dt, [&](auto tag) {
    using Tt = decltype(tag);
    pair_down_combine_kernel<Tt><<<static_cast<unsigned>((items + kDownWarps - 1) / kDownWarps), kDownThreads, 0, s>>>(
        static_cast<const Tt*>(act), static_cast<const Tt*>(down), expert, weight, static_cast<int>(T),
        static_cast<int>(K), static_cast<int>(C), static_cast<int>(I), y, accumulate);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void moe_pair_down_combine_naive(const void* act, const void* down, const int32_t* expert, const float* weight,
                                 DType dt, int64_t T, int64_t K, int64_t C, int64_t I, float* y, bool accumulate,
                                 cudaStream_t s) {
  check_pairs(T, K, C, I, dt, act, down, act);
  if (T == 0) return;
  const int64_t items = T * C;
  by_dtype(dt, [&](auto tag) {
    using Tt = decltype(tag);
    pair_down_combine_naive_kernel<Tt><<<static_cast<unsigned>((items + 127) / 128), 128, 0, s>>>(
        static_cast<const Tt*>(act), static_cast<const Tt*>(down), expert, weight, static_cast<int>(T),
        static_cast<int>(K), static_cast<int>(C), static_cast<int>(I), y, accumulate);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
