#include "kernels/cuda/gemm/gemv_norm.h"

#include <algorithm>

#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/gemm/gemv_norm_stage.cuh"
#include "kernels/cuda/gemm/gemv_warp.cuh"

namespace vlm::cuda {

namespace {

using namespace gemv_detail;

// Blocks stride over the ceil(N / kWarps) column groups; warp -> column n of its group. The
// epilogue is gemv_kernel's. PDL (pdl.cuh): the heads' prefetch, then the wait before x is read;
// the trigger after the block's last group.
template <class T, class TO, int M>
__global__ void __launch_bounds__(kThreads)
gemv_norm_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows, const float* __restrict__ nw, float eps,
                 const T* __restrict__ w, const TO* __restrict__ bias, TO* y, bool accumulate, int N, int K,
                 int prefetch) {
  extern __shared__ __align__(16) unsigned char staged[];
  T* xs = reinterpret_cast<T*>(staged);  // [M, K] dt, the normalized rows
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, K8 = K / 8, groups = (N + kWarps - 1) / kWarps;
  if (const int n0 = blockIdx.x * kWarps + warp; n0 < N)
    prefetch_head(reinterpret_cast<const uint4*>(w) + int64_t(n0) * K8, K8, lane, prefetch);
  pdl_wait();
  stage_normalized<T, M>(x, rows, nw, eps, K, xs);
  for (int grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    const int n = grp * kWarps + warp;
    if (n >= N) break;  // only in the last group
    const uint4* wr[1] = {reinterpret_cast<const uint4*>(w) + int64_t(n) * K8};
    float acc[1][M];
    warp_dot<T, M, 1, true>(reinterpret_cast<const uint4*>(xs), wr, K8, lane, acc);
    store_column<TO, M>(acc, lane, bias, accumulate, y, N, n);
  }
  pdl_trigger();
}

// As gemv_norm_kernel over the gate/up row pairs (gemv_silu_mul_kernel's epilogue).
template <class T, int M>
__global__ void __launch_bounds__(kThreads)
gemv_silu_mul_norm_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows, const float* __restrict__ nw,
                          float eps, const T* __restrict__ w, const T* __restrict__ bias, T* out, int I, int K,
                          int prefetch) {
  extern __shared__ __align__(16) unsigned char staged[];
  T* xs = reinterpret_cast<T*>(staged);  // [M, K] dt, the normalized rows
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, K8 = K / 8, groups = (I + kWarps - 1) / kWarps;
  const uint4* base = reinterpret_cast<const uint4*>(w);
  if (const int i0 = blockIdx.x * kWarps + warp; i0 < I) {
    prefetch_head(base + int64_t(i0) * K8, K8, lane, prefetch);
    prefetch_head(base + int64_t(I + i0) * K8, K8, lane, prefetch);
  }
  pdl_wait();
  stage_normalized<T, M>(x, rows, nw, eps, K, xs);
  for (int grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    const int i = grp * kWarps + warp;
    if (i >= I) break;  // only in the last group
    const uint4* wr[2] = {base + int64_t(i) * K8, base + int64_t(I + i) * K8};
    float acc[2][M];
    warp_dot<T, M, 2, true>(reinterpret_cast<const uint4*>(xs), wr, K8, lane, acc);
    store_silu_mul<T, M>(acc, lane, bias, out, I, i);
  }
  pdl_trigger();
}

void check_norm_shape(int64_t M, int64_t N, int64_t K, DType dt) {
  if (!gemv_norm_supported(M, K, dt))
    precondition_failed("gemv_norm: M in [1, kGemvMaxRows], K % 8 == 0, BF16 or F16, M K sizeof(dt) staged bytes");
  if (N < 1 || N >= (int64_t(1) << 31) - kWarps) precondition_failed("gemv_norm: N in [1, 2^31)");
}

}  // namespace

bool gemv_norm_supported(int64_t M, int64_t K, DType dt) {
  return gemv_supported(M, K, dt) && M * K * static_cast<int64_t>(dtype_size(dt)) <= kGemvNormMaxStagedBytes;
}

void gemv_norm(const float* x, const int32_t* rows, const float* norm_w, float eps, const void* w, DType dt,
               const void* bias, void* y, DType out_dt, bool accumulate, int64_t M, int64_t N, int64_t K,
               cudaStream_t s) {
  check_norm_shape(M, N, K, dt);
  if (out_dt != dt && out_dt != DType::F32) precondition_failed("gemv_norm: output in the inputs' type or F32");
  const size_t smem = static_cast<size_t>(M * K) * dtype_size(dt);
  const int64_t groups = (N + kWarps - 1) / kWarps;
  dispatch_half(dt, [&](auto t) {
    using T = decltype(t);
    const int64_t row_bytes = K * int64_t(sizeof(T));
    dispatch_rows(M, [&](auto r) {
      constexpr int R = decltype(r)::value;
      if (out_dt == DType::F32) {
        const auto kernel = gemv_norm_kernel<T, float, R>;
        const unsigned grid = grid_for(reinterpret_cast<const void*>(kernel), smem, groups);
        launch_pdl(kernel, grid, kThreads, smem, s, x, rows, norm_w, eps, static_cast<const T*>(w),
                   static_cast<const float*>(bias), static_cast<float*>(y), accumulate, static_cast<int>(N),
                   static_cast<int>(K), head_prefetch(std::min<int64_t>(N, int64_t(grid) * kWarps), row_bytes));
      } else {
        const auto kernel = gemv_norm_kernel<T, T, R>;
        const unsigned grid = grid_for(reinterpret_cast<const void*>(kernel), smem, groups);
        launch_pdl(kernel, grid, kThreads, smem, s, x, rows, norm_w, eps, static_cast<const T*>(w),
                   static_cast<const T*>(bias), static_cast<T*>(y), accumulate, static_cast<int>(N),
                   static_cast<int>(K), head_prefetch(std::min<int64_t>(N, int64_t(grid) * kWarps), row_bytes));
      }
    });
  });
}

void gemv_silu_mul_norm(const float* x, const int32_t* rows, const float* norm_w, float eps, const void* w, DType dt,
                        const void* bias, void* out, int64_t M, int64_t I, int64_t K, cudaStream_t s) {
  check_norm_shape(M, 2 * I, K, dt);
  const size_t smem = static_cast<size_t>(M * K) * dtype_size(dt);
  const int64_t groups = (I + kWarps - 1) / kWarps;
  dispatch_half(dt, [&](auto t) {
    using T = decltype(t);
    dispatch_rows(M, [&](auto r) {
      constexpr int R = decltype(r)::value;
      const auto kernel = gemv_silu_mul_norm_kernel<T, R>;
      const unsigned grid = grid_for(reinterpret_cast<const void*>(kernel), smem, groups);
      launch_pdl(kernel, grid, kThreads, smem, s, x, rows, norm_w, eps, static_cast<const T*>(w),
                 static_cast<const T*>(bias), static_cast<T*>(out), static_cast<int>(I), static_cast<int>(K),
                 head_prefetch(2 * std::min<int64_t>(I, int64_t(grid) * kWarps), K * int64_t(sizeof(T))));
    });
  });
}

}  // namespace vlm::cuda
