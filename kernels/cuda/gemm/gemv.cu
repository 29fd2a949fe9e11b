#include "kernels/cuda/gemm/gemv.h"

#include "kernels/cuda/gemm/gemv_warp.cuh"

namespace vlm::cuda {

namespace {

using namespace gemv_detail;

// grid ceil(N / kWarps): warp -> column n. PDL (pdl.cuh): the row's first `prefetch` bytes asked
// of L2, then the wait; the trigger after the dot.
template <class T, class TO, int M>
__global__ void __launch_bounds__(kThreads)
gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, const TO* __restrict__ bias, TO* y, bool accumulate,
            int N, int K, int prefetch) {
  const int lane = threadIdx.x % 32, n = blockIdx.x * kWarps + threadIdx.x / 32;
  const int K8 = K / 8;
  const uint4* rows[1] = {reinterpret_cast<const uint4*>(w) + int64_t(n) * K8};
  if (prefetch > 0 && lane == 0 && n < N) prefetch_l2(rows[0], prefetch);
  pdl_wait();
  if (n >= N) return;
  float acc[1][M];
  warp_dot<T, M, 1>(reinterpret_cast<const uint4*>(x), rows, K8, lane, acc);
  pdl_trigger();
  if (lane >= M) return;
  store_column<TO, M>(acc, lane, bias, accumulate, y, N, n);
}

// grid ceil(I / kWarps): warp -> gate row i and up row I + i. PDL as gemv_kernel.
template <class T, int M>
__global__ void __launch_bounds__(kThreads)
gemv_silu_mul_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, T* out, int I,
                     int K, int prefetch) {
  const int lane = threadIdx.x % 32, i = blockIdx.x * kWarps + threadIdx.x / 32;
  const int K8 = K / 8;
  const uint4* base = reinterpret_cast<const uint4*>(w);
  const uint4* rows[2] = {base + int64_t(i) * K8, base + int64_t(I + i) * K8};
  if (prefetch > 0 && lane < 2 && i < I) prefetch_l2(lane == 0 ? rows[0] : rows[1], prefetch);
  pdl_wait();
  if (i >= I) return;
  float acc[2][M];
  warp_dot<T, M, 2>(reinterpret_cast<const uint4*>(x), rows, K8, lane, acc);
  pdl_trigger();
  store_silu_mul<T, M>(acc, lane, bias, out, I, i);
}

// ---- naive references: one thread per output element ----

template <class T, class TO>
__global__ void gemv_naive_kernel(const T* x, const T* w, const TO* bias, TO* y, bool accumulate, int N, int K) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
  if (n >= N) return;
  float v = 0.f;
  for (int k = 0; k < K; ++k) v = fmaf(to_f32(w[int64_t(n) * K + k]), to_f32(x[int64_t(m) * K + k]), v);
  if (bias) v += to_f32(bias[n]);
  if (accumulate) v += to_f32(y[int64_t(m) * N + n]);
  y[int64_t(m) * N + n] = from_f32<TO>(v);
}

template <class T>
__global__ void gemv_silu_mul_naive_kernel(const T* x, const T* w, const T* bias, T* out, int I, int K) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
  if (i >= I) return;
  float g = 0.f, u = 0.f;
  for (int k = 0; k < K; ++k) {
    const float xv = to_f32(x[int64_t(m) * K + k]);
    g = fmaf(to_f32(w[int64_t(i) * K + k]), xv, g);
    u = fmaf(to_f32(w[int64_t(I + i) * K + k]), xv, u);
  }
  if (bias) {
    g += to_f32(bias[i]);
    u += to_f32(bias[I + i]);
  }
  out[int64_t(m) * I + i] = from_f32<T>(silu_mul_of<T>(g, u));
}

void check_shape(int64_t M, int64_t N, int64_t K, DType dt) {
  if (!gemv_supported(M, K, dt)) precondition_failed("gemv: M in [1, kGemvMaxRows], K % 8 == 0, BF16 or F16");
  if (N >= (int64_t(1) << 31) || K >= (int64_t(1) << 31)) precondition_failed("gemv: N and K below 2^31");
}

}  // namespace

bool gemv_supported(int64_t M, int64_t K, DType dt) {
  return M >= 1 && M <= kGemvMaxRows && K % 8 == 0 && (dt == DType::BF16 || dt == DType::F16);
}

void gemv(const void* x, const void* w, DType dt, const void* bias, void* y, DType out_dt, bool accumulate, int64_t M,
          int64_t N, int64_t K, cudaStream_t s) {
  check_shape(M, N, K, dt);
  if (out_dt != dt && out_dt != DType::F32) precondition_failed("gemv: output in the inputs' type or F32");
  dispatch_half(dt, [&](auto t) {
    using T = decltype(t);
    const int prefetch = pdl_row_prefetch(N, K * int64_t(sizeof(T)));
    dispatch_rows(M, [&](auto rows) {
      constexpr int R = decltype(rows)::value;
      if (out_dt == DType::F32)
        launch_pdl(gemv_kernel<T, float, R>, blocks(N, kWarps), kThreads, 0, s, static_cast<const T*>(x),
                   static_cast<const T*>(w), static_cast<const float*>(bias), static_cast<float*>(y), accumulate,
                   static_cast<int>(N), static_cast<int>(K), prefetch);
      else
        launch_pdl(gemv_kernel<T, T, R>, blocks(N, kWarps), kThreads, 0, s, static_cast<const T*>(x),
                   static_cast<const T*>(w), static_cast<const T*>(bias), static_cast<T*>(y), accumulate,
                   static_cast<int>(N), static_cast<int>(K), prefetch);
    });
  });
}

void gemv_silu_mul(const void* x, const void* w, DType dt, const void* bias, void* out, int64_t M, int64_t I, int64_t K,
                   cudaStream_t s) {
  check_shape(M, 2 * I, K, dt);
  dispatch_half(dt, [&](auto t) {
    using T = decltype(t);
    const int prefetch = pdl_row_prefetch(2 * I, K * int64_t(sizeof(T)));
    dispatch_rows(M, [&](auto rows) {
      constexpr int R = decltype(rows)::value;
      launch_pdl(gemv_silu_mul_kernel<T, R>, blocks(I, kWarps), kThreads, 0, s, static_cast<const T*>(x),
                 static_cast<const T*>(w), static_cast<const T*>(bias), static_cast<T*>(out), static_cast<int>(I),
                 static_cast<int>(K), prefetch);
    });
  });
}

void gemv_naive(const void* x, const void* w, DType dt, const void* bias, void* y, DType out_dt, bool accumulate,
                int64_t M, int64_t N, int64_t K, cudaStream_t s) {
  check_shape(M, N, K, dt);
  dispatch_half(dt, [&](auto t) {
    using T = decltype(t);
    const dim3 grid(blocks(N, 128), static_cast<unsigned>(M));
    if (out_dt == DType::F32)
      gemv_naive_kernel<T, float><<<grid, 128, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(w),
                                                       static_cast<const float*>(bias), static_cast<float*>(y),
                                                       accumulate, static_cast<int>(N), static_cast<int>(K));
    else
      gemv_naive_kernel<T, T><<<grid, 128, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(w),
                                                   static_cast<const T*>(bias), static_cast<T*>(y), accumulate,
                                                   static_cast<int>(N), static_cast<int>(K));
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void gemv_silu_mul_naive(const void* x, const void* w, DType dt, const void* bias, void* out, int64_t M, int64_t I,
                         int64_t K, cudaStream_t s) {
  check_shape(M, 2 * I, K, dt);
  dispatch_half(dt, [&](auto t) {
    using T = decltype(t);
    gemv_silu_mul_naive_kernel<T><<<dim3(blocks(I, 128), static_cast<unsigned>(M)), 128, 0, s>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias), static_cast<T*>(out),
        static_cast<int>(I), static_cast<int>(K));
  });
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
