#include "kernels/cuda/gemm/fp8_gemv.h"

#include <cuda_fp8.h>

#include <algorithm>

#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/gemm/fp8_dot.cuh"
#include "kernels/cuda/gemm/gemv_warp.cuh"

namespace vlm::cuda {
namespace {

using namespace gemv_detail;

// acc[r][m] = sum over the warp of fp8(w_r) . x_m (unscaled); lane j takes 16-byte weight
// vectors j, j + 32, ... (kUnroll in flight per row), x's rows [M, K] read as 2 vectors each.
template <class T, int M, int R>
__device__ __forceinline__ void warp_dot_fp8(const uint4* __restrict__ x, const uint4* const (&w)[R], int K16, int lane,
                                             float (&acc)[R][M]) {
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.f;
  const int K8 = 2 * K16;  // x's 16-byte vectors per row
  for (int base = lane; base < K16; base += 32 * kUnroll) {
    uint4 wv[R][kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * 32;
#pragma unroll
      for (int r = 0; r < R; ++r) wv[r][u] = i < K16 ? load_stream(w[r] + i) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * 32;
      if (i >= K16) break;
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const uint4 x0 = __ldg(x + int64_t(m) * K8 + 2 * i), x1 = __ldg(x + int64_t(m) * K8 + 2 * i + 1);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r][m] = dot16<T>(wv[r][u], x0, x1, acc[r][m]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = warp_sum(acc[r][m]);
}

template <class T, class TO, int M>
__global__ void __launch_bounds__(kThreads)
fp8_gemv_kernel(const T* __restrict__ x, const uint8_t* __restrict__ w, const float* __restrict__ w_scale,
                const TO* __restrict__ bias, TO* y, bool accumulate, int N, int K) {
  const int lane = threadIdx.x % 32, n = blockIdx.x * kWarps + threadIdx.x / 32;
  if (n >= N) return;
  const int K16 = K / 16;
  const uint4* rows[1] = {reinterpret_cast<const uint4*>(w) + int64_t(n) * K16};
  float acc[1][M];
  warp_dot_fp8<T, M, 1>(reinterpret_cast<const uint4*>(x), rows, K16, lane, acc);
  if (lane >= M) return;
  const float sc = w_scale[n];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[0][m] *= sc;
  store_column<TO, M>(acc, lane, bias, accumulate, y, N, n);
}

template <class T, int M>
__global__ void __launch_bounds__(kThreads)
fp8_gemv_silu_mul_kernel(const T* __restrict__ x, const uint8_t* __restrict__ w, const float* __restrict__ w_scale,
                         const T* __restrict__ bias, T* out, int I, int K) {
  const int lane = threadIdx.x % 32, i = blockIdx.x * kWarps + threadIdx.x / 32;
  if (i >= I) return;
  const int K16 = K / 16;
  const uint4* base = reinterpret_cast<const uint4*>(w);
  const uint4* rows[2] = {base + int64_t(i) * K16, base + int64_t(I + i) * K16};
  float acc[2][M];
  warp_dot_fp8<T, M, 2>(reinterpret_cast<const uint4*>(x), rows, K16, lane, acc);
  const float sg = w_scale[i], su = w_scale[I + i];
#pragma unroll
  for (int m = 0; m < M; ++m) {
    acc[0][m] *= sg;
    acc[1][m] *= su;
  }
  store_silu_mul<T, M>(acc, lane, bias, out, I, i);
}

// The streaming form: a grid of at most the GPU's resident warps, warp v owning columns v, v + V,
// ... (V warps in all, balanced: ceil(N / resident warps) columns each), its weight vectors one
// sequence (column by column, lane + 32 j within each) kept D loads ahead in a ring of registers
// across the columns' ends, so a warp streams without draining between columns. Each lane sums
// the same vectors in the same order as warp_dot_fp8, and the warp sum, scale and epilogue are the
// same: outputs bitwise equal to the simple kernels'. R = 1: y (fp8_gemv); R = 2: gate row c and up
// row N + c, out = silu_mul (fp8_gemv_silu_mul, N = I).
template <class T, class TO, int M, int R>
__global__ void __launch_bounds__(kThreads)
fp8_gemv_stream_kernel(const T* __restrict__ x, const uint8_t* __restrict__ w, const float* __restrict__ w_scale,
                       const TO* __restrict__ bias, TO* y, bool accumulate, int N, int K) {
  constexpr int D = R == 1 ? 8 : 4;
  const int lane = threadIdx.x % 32, v = blockIdx.x * kWarps + threadIdx.x / 32, V = gridDim.x * kWarps;
  if (v >= N) return;
  const int K16 = K / 16, J = (K16 + 31) / 32, K8 = 2 * K16;
  const int total = (N - v + V - 1) / V * J;  // this warp's (column, j) items
  const uint4* wb = reinterpret_cast<const uint4*>(w);
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  int pc = v, pj = 0;  // the next item to load
  auto load_next = [&](uint4(&dst)[R]) {
    const int i = lane + 32 * pj;
#pragma unroll
    for (int r = 0; r < R; ++r)
      dst[r] = i < K16 ? load_stream(wb + (int64_t(pc) + (r == 1 ? N : 0)) * K16 + i) : make_uint4(0, 0, 0, 0);
    if (++pj == J) pj = 0, pc += V;
  };
  uint4 ring[D][R];
#pragma unroll
  for (int d = 0; d < D; ++d)
    if (d < total) load_next(ring[d]);
  int cc = v, cj = 0;  // the item being summed
  float acc[R][M];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.f;
  for (int q0 = 0; q0 < total; q0 += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const int q = q0 + d;
      if (q >= total) break;
      uint4 wv[R];
#pragma unroll
      for (int r = 0; r < R; ++r) wv[r] = ring[d][r];
      if (q + D < total) load_next(ring[d]);
      const int i = lane + 32 * cj;
      if (i < K16) {
#pragma unroll
        for (int m = 0; m < M; ++m) {
          const uint4 x0 = __ldg(xv + int64_t(m) * K8 + 2 * i), x1 = __ldg(xv + int64_t(m) * K8 + 2 * i + 1);
#pragma unroll
          for (int r = 0; r < R; ++r) acc[r][m] = dot16<T>(wv[r], x0, x1, acc[r][m]);
        }
      }
      if (++cj < J) continue;
      // Column cc is complete (warp-uniform): the simple kernels' warp sum, scale and epilogue.
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int m = 0; m < M; ++m) acc[r][m] = warp_sum(acc[r][m]);
      if (lane < M) {
        if constexpr (R == 1) {
          const float sc = w_scale[cc];
#pragma unroll
          for (int m = 0; m < M; ++m) acc[0][m] *= sc;
          store_column<TO, M>(acc, lane, bias, accumulate, y, N, cc);
        } else {
          const float sg = w_scale[cc], su = w_scale[N + cc];
#pragma unroll
          for (int m = 0; m < M; ++m) {
            acc[0][m] *= sg;
            acc[1][m] *= su;
          }
          store_silu_mul<TO, M>(acc, lane, bias, y, N, cc);
        }
      }
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int m = 0; m < M; ++m) acc[r][m] = 0.f;
      cj = 0;
      cc += V;
    }
  }
}

// Blocks of the streaming grid for N columns: the kernel's resident blocks on this GPU (per SM:
// learned once per kernel), then as few warps as keep ceil(N / resident warps) columns on each.
template <class T, class TO, int M, int R>
unsigned stream_blocks(int64_t N) {
  static const int per_sm = [] {
    int n = 1;
    VLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fp8_gemv_stream_kernel<T, TO, M, R>, kThreads, 0));
    return std::max(n, 1);
  }();
  int dev = 0, sms = 132;
  VLM_CUDA_CHECK(cudaGetDevice(&dev));
  VLM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int64_t slots = std::max<int64_t>(1, int64_t(sms) * per_sm * kWarps);
  const int64_t per_warp = (N + slots - 1) / slots, warps = (N + per_warp - 1) / per_warp;
  return blocks(warps, kWarps);
}

// ---- naive references: one thread per output element ----

template <class T, class TO>
__global__ void fp8_gemv_naive_kernel(const T* x, const uint8_t* w, const float* ws, const TO* bias, TO* y,
                                      bool accumulate, int N, int K) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
  if (n >= N) return;
  float v = 0.f;
  for (int k = 0; k < K; ++k) v = fmaf(fp8_f32(w[int64_t(n) * K + k]), to_f32(x[int64_t(m) * K + k]), v);
  v *= ws[n];
  if (bias) v += to_f32(bias[n]);
  if (accumulate) v += to_f32(y[int64_t(m) * N + n]);
  y[int64_t(m) * N + n] = from_f32<TO>(v);
}

template <class T>
__global__ void fp8_gemv_silu_mul_naive_kernel(const T* x, const uint8_t* w, const float* ws, const T* bias, T* out,
                                               int I, int K) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
  if (i >= I) return;
  float g = 0.f, u = 0.f;
  for (int k = 0; k < K; ++k) {
    const float xv = to_f32(x[int64_t(m) * K + k]);
    g = fmaf(fp8_f32(w[int64_t(i) * K + k]), xv, g);
    u = fmaf(fp8_f32(w[int64_t(I + i) * K + k]), xv, u);
  }
  g *= ws[i];
  u *= ws[I + i];
  if (bias) {
    g += to_f32(bias[i]);
    u += to_f32(bias[I + i]);
  }
  out[int64_t(m) * I + i] = from_f32<T>(silu_mul_of<T>(g, u));
}

void check_shape(int64_t M, int64_t N, int64_t K, DType dt) {
  if (!fp8_gemv_supported(M, K, dt)) precondition_failed("fp8_gemv: M in [1, kGemvMaxRows], K % 16 == 0, BF16 or F16");
  if (N >= (int64_t(1) << 31) || K >= (int64_t(1) << 31)) precondition_failed("fp8_gemv: N and K below 2^31");
}

template <bool kStream>
void launch_gemv(const void* x, const uint8_t* wq, const float* w_scale, DType dt, const void* bias, void* y,
                 DType out_dt, bool accumulate, int64_t M, int64_t N, int64_t K, cudaStream_t s) {
  dispatch_half(dt, [&](auto t) {
    using T = decltype(t);
    dispatch_rows(M, [&](auto rows) {
      constexpr int R = decltype(rows)::value;
      auto go = [&](auto out) {
        using TO = decltype(out);
        const auto* b = static_cast<const TO*>(bias);
        auto* yo = static_cast<TO*>(y);
        if constexpr (kStream) {
          fp8_gemv_stream_kernel<T, TO, R, 1><<<stream_blocks<T, TO, R, 1>(N), kThreads, 0, s>>>(
              static_cast<const T*>(x), wq, w_scale, b, yo, accumulate, static_cast<int>(N), static_cast<int>(K));
        } else {
          fp8_gemv_kernel<T, TO, R><<<blocks(N, kWarps), kThreads, 0, s>>>(
              static_cast<const T*>(x), wq, w_scale, b, yo, accumulate, static_cast<int>(N), static_cast<int>(K));
        }
      };
      if (out_dt == DType::F32) go(float{});
      else go(T{});
    });
  });
}

template <bool kStream>
void launch_silu_mul(const void* x, const uint8_t* wq, const float* w_scale, DType dt, const void* bias, void* out,
                     int64_t M, int64_t I, int64_t K, cudaStream_t s) {
  dispatch_half(dt, [&](auto t) {
    using T = decltype(t);
    dispatch_rows(M, [&](auto rows) {
      constexpr int R = decltype(rows)::value;
      if constexpr (kStream) {
        fp8_gemv_stream_kernel<T, T, R, 2><<<stream_blocks<T, T, R, 2>(I), kThreads, 0, s>>>(
            static_cast<const T*>(x), wq, w_scale, static_cast<const T*>(bias), static_cast<T*>(out), false,
            static_cast<int>(I), static_cast<int>(K));
      } else {
        fp8_gemv_silu_mul_kernel<T, R><<<blocks(I, kWarps), kThreads, 0, s>>>(
            static_cast<const T*>(x), wq, w_scale, static_cast<const T*>(bias), static_cast<T*>(out),
            static_cast<int>(I), static_cast<int>(K));
      }
    });
  });
}

}  // namespace

bool fp8_gemv_supported(int64_t M, int64_t K, DType dt) {
  return M >= 1 && M <= kGemvMaxRows && K % 16 == 0 && (dt == DType::BF16 || dt == DType::F16);
}

void fp8_gemv(const void* x, const uint8_t* wq, const float* w_scale, DType dt, const void* bias, void* y, DType out_dt,
              bool accumulate, int64_t M, int64_t N, int64_t K, cudaStream_t s, Fp8GemvForm form) {
  check_shape(M, N, K, dt);
  if (out_dt != dt && out_dt != DType::F32) precondition_failed("fp8_gemv: output in the input's type or F32");
  if (form == Fp8GemvForm::Pipelined) launch_gemv<true>(x, wq, w_scale, dt, bias, y, out_dt, accumulate, M, N, K, s);
  else launch_gemv<false>(x, wq, w_scale, dt, bias, y, out_dt, accumulate, M, N, K, s);
  VLM_CUDA_CHECK_LAUNCH();
}

void fp8_gemv_silu_mul(const void* x, const uint8_t* wq, const float* w_scale, DType dt, const void* bias, void* out,
                       int64_t M, int64_t I, int64_t K, cudaStream_t s, Fp8GemvForm form) {
  check_shape(M, 2 * I, K, dt);
  if (form == Fp8GemvForm::Pipelined) launch_silu_mul<true>(x, wq, w_scale, dt, bias, out, M, I, K, s);
  else launch_silu_mul<false>(x, wq, w_scale, dt, bias, out, M, I, K, s);
  VLM_CUDA_CHECK_LAUNCH();
}

void fp8_gemv_naive(const void* x, const uint8_t* wq, const float* w_scale, DType dt, const void* bias, void* y,
                    DType out_dt, bool accumulate, int64_t M, int64_t N, int64_t K, cudaStream_t s) {
  check_shape(M, N, K, dt);
  dispatch_half(dt, [&](auto t) {
    using T = decltype(t);
    const dim3 grid(blocks(N, 128), static_cast<unsigned>(M));
    if (out_dt == DType::F32)
      fp8_gemv_naive_kernel<T, float><<<grid, 128, 0, s>>>(static_cast<const T*>(x), wq, w_scale,
                                                           static_cast<const float*>(bias), static_cast<float*>(y),
                                                           accumulate, static_cast<int>(N), static_cast<int>(K));
    else
      fp8_gemv_naive_kernel<T, T><<<grid, 128, 0, s>>>(static_cast<const T*>(x), wq, w_scale,
                                                       static_cast<const T*>(bias), static_cast<T*>(y), accumulate,
                                                       static_cast<int>(N), static_cast<int>(K));
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void fp8_gemv_silu_mul_naive(const void* x, const uint8_t* wq, const float* w_scale, DType dt, const void* bias,
                             void* out, int64_t M, int64_t I, int64_t K, cudaStream_t s) {
  check_shape(M, 2 * I, K, dt);
  dispatch_half(dt, [&](auto t) {
    using T = decltype(t);
    fp8_gemv_silu_mul_naive_kernel<T><<<dim3(blocks(I, 128), static_cast<unsigned>(M)), 128, 0, s>>>(
        static_cast<const T*>(x), wq, w_scale, static_cast<const T*>(bias), static_cast<T*>(out), static_cast<int>(I),
        static_cast<int>(K));
  });
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
