#include "kernels/cuda/gemm/fp8_gemv_split.h"

#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/gemm/fp8_dot.cuh"
#include "kernels/cuda/gemm/fp8_gemv.h"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/gemm/gemv_warp.cuh"

namespace vlm::cuda {
namespace {

using namespace gemv_detail;

// Column n = blockIdx.x * (kWarps / S) + warp / S, part p = warp % S (see the header).
template <class T, class TO, int M, int S>
__global__ void __launch_bounds__(kThreads)
fp8_gemv_split_kernel(const T* __restrict__ x, const uint8_t* __restrict__ w, const float* __restrict__ w_scale,
                      const TO* __restrict__ bias, TO* y, bool accumulate, int N, int K) {
  constexpr int kCols = kWarps / S;
  __shared__ float parts[kWarps][M];  // [warp][row m] the warps' sums
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, p = warp % S;
  const int n = blockIdx.x * kCols + warp / S;
  if (n < N) {
    const int K16 = K / 16, K8 = 2 * K16;
    const uint4* row = reinterpret_cast<const uint4*>(w) + int64_t(n) * K16;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = 0.f;
    for (int base = lane + 32 * p; base < K16; base += 32 * S * kUnroll) {
      uint4 wv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * 32 * S;
        wv[u] = i < K16 ? load_stream(row + i) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * 32 * S;
        if (i >= K16) break;
#pragma unroll
        for (int m = 0; m < M; ++m) {
          const uint4 x0 = __ldg(xv + int64_t(m) * K8 + 2 * i), x1 = __ldg(xv + int64_t(m) * K8 + 2 * i + 1);
          acc[m] = dot16<T>(wv[u], x0, x1, acc[m]);
        }
      }
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
      acc[m] = warp_sum(acc[m]);
      if (lane == 0) parts[warp][m] = acc[m];
    }
  }
  __syncthreads();
  if (n >= N || p != 0 || lane >= M) return;
  const float sc = w_scale[n];
  float out[1][M];
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float v = 0.f;
#pragma unroll
    for (int q = 0; q < S; ++q) v += parts[warp + q][m];
    out[0][m] = v * sc;
  }
  store_column<TO, M>(out, lane, bias, accumulate, y, N, n);
}

template <int S>
void launch(const void* x, const uint8_t* wq, const float* w_scale, DType dt, const void* bias, void* y, DType out_dt,
            bool accumulate, int64_t M, int64_t N, int64_t K, cudaStream_t s) {
  dispatch_half(dt, [&](auto t) {
    using T = decltype(t);
    dispatch_rows(M, [&](auto rows) {
      constexpr int R = decltype(rows)::value;
      auto go = [&](auto o) {
        using TO = decltype(o);
        fp8_gemv_split_kernel<T, TO, R, S><<<blocks(N, kWarps / S), kThreads, 0, s>>>(
            static_cast<const T*>(x), wq, w_scale, static_cast<const TO*>(bias), static_cast<TO*>(y), accumulate,
            static_cast<int>(N), static_cast<int>(K));
      };
      if (out_dt == DType::F32) go(float{});
      else go(T{});
    });
  });
}

}  // namespace

bool fp8_gemv_split_supported(int64_t M, int64_t K, DType dt, int split) {
  return (split == 2 || split == 4) && fp8_gemv_supported(M, K, dt);
}

void fp8_gemv_split(const void* x, const uint8_t* wq, const float* w_scale, DType dt, const void* bias, void* y,
                    DType out_dt, bool accumulate, int64_t M, int64_t N, int64_t K, int split, cudaStream_t s) {
  if (!fp8_gemv_split_supported(M, K, dt, split))
    precondition_failed("fp8_gemv_split: split 2 or 4, M in [1, kGemvMaxRows], K % 16 == 0, BF16 or F16");
  if (N >= (int64_t(1) << 31) || K >= (int64_t(1) << 31)) precondition_failed("fp8_gemv_split: N and K below 2^31");
  if (out_dt != dt && out_dt != DType::F32) precondition_failed("fp8_gemv_split: output in the input's type or F32");
  if (split == 2) launch<2>(x, wq, w_scale, dt, bias, y, out_dt, accumulate, M, N, K, s);
  else launch<4>(x, wq, w_scale, dt, bias, y, out_dt, accumulate, M, N, K, s);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
