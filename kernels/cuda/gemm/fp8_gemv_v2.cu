#include "kernels/cuda/gemm/fp8_gemv_v2.h"

#include <algorithm>

#include "kernels/cuda/gemm/fp8_dot.cuh"
#include "kernels/cuda/gemm/fp8_gemv.h"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/gemm/gemv_norm.h"
#include "kernels/cuda/gemm/gemv_norm_stage.cuh"
#include "kernels/cuda/gemm/gemv_warp.cuh"

namespace vlm::cuda {
namespace {

using namespace gemv_detail;

// Weight loads of 16 bytes in flight per lane and row of w: 8 for one row (the plain product), 4
// for the gate/up pair (8 in all).
template <int R>
constexpr int kLoadsPerRow = R == 1 ? 8 : 4;

// Warps a block: the norm forms 8 (kThreads: stage_normalized's partition of the row), the plain
// forms 4, so that at the register budget below one wave holds more columns (9 blocks of 4 warps
// a SM at 56 registers, 1,188 blocks on 132 SMs: a whole q/k/v product, 4608 columns, in one wave;
// 8-warp blocks fit 4 a SM, 528 of the 576).
template <bool kNorm>
constexpr int kBlockWarps = kNorm ? kWarps : 4;
// Resident blocks a SM asked of the compiler: 64 registers a thread for M <= 2; 3 / 4 of the
// blocks (85 registers) for M = 3, 4, whose accumulators and x vectors spill at 64.
template <int M, bool kNorm>
constexpr int kMinBlocks = (kNorm ? 4 : 8) * (M <= 2 ? 4 : 3) / 4;

// acc[r][m] = sum over the warp of fp8(w_r) . x_m (unscaled), as fp8_gemv.cu's warp_dot_fp8 with U
// loads of each row in flight: lane j sums vectors j, j + 32, ... in order (the same vectors in the
// same order whatever U is). x's M rows [M, K] dt, 2 16-byte vectors per weight vector, from global
// memory (read-only path) or from shared memory (kSharedX: the staged normalized rows).
template <class T, int M, int R, int U, bool kSharedX>
__device__ __forceinline__ void warp_dot_fp8_u(const uint4* __restrict__ x, const uint4* const (&w)[R], int K16,
                                               int lane, float (&acc)[R][M]) {
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.f;
  const int K8 = 2 * K16;  // x's 16-byte vectors per row
  for (int base = lane; base < K16; base += 32 * U) {
    uint4 wv[R][U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = base + u * 32;
#pragma unroll
      for (int r = 0; r < R; ++r) wv[r][u] = i < K16 ? load_stream(w[r] + i) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = base + u * 32;
      if (i >= K16) break;
#pragma unroll
      for (int m = 0; m < M; ++m) {
        uint4 x0, x1;
        if constexpr (kSharedX) {
          x0 = x[int64_t(m) * K8 + 2 * i];
          x1 = x[int64_t(m) * K8 + 2 * i + 1];
        } else {
          x0 = __ldg(x + int64_t(m) * K8 + 2 * i);
          x1 = __ldg(x + int64_t(m) * K8 + 2 * i + 1);
        }
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

// One kernel for the four products. R = 1: y [M, N] = x wq^T * scale (+ bias) (+ y) (TO: out_dt);
// R = 2: out [M, N] = silu_mul of the gate row c and up row N + c (N = I, TO = T). kNorm: xin is the
// f32 residual [*, K] (rows gathered by `rows`), normalized into shared memory first; else xin is
// x [M, K] dt. Blocks of W warps stride over the ceil(N / W) column groups (warp -> column of its
// group).
// PDL (pdl.cuh): the first group's weight heads asked of L2, then the wait; the trigger at the end.
template <class T, class TO, int M, int R, bool kNorm>
__global__ void __launch_bounds__(32 * kBlockWarps<kNorm>, kMinBlocks<M, kNorm>)
fp8_gemv_v2_kernel(const void* __restrict__ xin, const int32_t* __restrict__ rows, const float* __restrict__ nw,
                   float eps, const uint8_t* __restrict__ w, const float* __restrict__ w_scale,
                   const TO* __restrict__ bias, TO* y, bool accumulate, int N, int K, int prefetch) {
  extern __shared__ __align__(16) unsigned char staged[];
  constexpr int W = kBlockWarps<kNorm>;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, K16 = K / 16, groups = (N + W - 1) / W;
  const uint4* wb = reinterpret_cast<const uint4*>(w);
  if (const int n0 = blockIdx.x * W + warp; n0 < N) {
    prefetch_head(wb + int64_t(n0) * K16, K16, lane, prefetch);
    if constexpr (R == 2) prefetch_head(wb + int64_t(N + n0) * K16, K16, lane, prefetch);
  }
  pdl_wait();
  const uint4* xv;
  if constexpr (kNorm) {
    T* xs = reinterpret_cast<T*>(staged);  // [M, K] dt, the normalized rows
    stage_normalized<T, M>(static_cast<const float*>(xin), rows, nw, eps, K, xs);
    xv = reinterpret_cast<const uint4*>(xs);
  } else {
    xv = static_cast<const uint4*>(xin);
  }
  for (int grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    const int n = grp * W + warp;
    if (n >= N) break;  // only in the last group
    const uint4* wr[R];
    wr[0] = wb + int64_t(n) * K16;
    if constexpr (R == 2) wr[1] = wb + int64_t(N + n) * K16;
    float acc[R][M];
    warp_dot_fp8_u<T, M, R, kLoadsPerRow<R>, kNorm>(xv, wr, K16, lane, acc);
    if (lane < M) {
      if constexpr (R == 1) {
        const float sc = w_scale[n];
#pragma unroll
        for (int m = 0; m < M; ++m) acc[0][m] *= sc;
        store_column<TO, M>(acc, lane, bias, accumulate, y, N, n);
      } else {
        const float sg = w_scale[n], su = w_scale[N + n];
#pragma unroll
        for (int m = 0; m < M; ++m) {
          acc[0][m] *= sg;
          acc[1][m] *= su;
        }
        store_silu_mul<TO, M>(acc, lane, bias, y, N, n);
      }
    }
  }
  pdl_trigger();
}

void check_shape(int64_t M, int64_t N, int64_t K, DType dt, bool norm) {
  if (!fp8_gemv_supported(M, K, dt))
    precondition_failed("fp8_gemv_v2: M in [1, kGemvMaxRows], K % 16 == 0, BF16 or F16");
  if (norm && !fp8_gemv_norm_supported(M, K, dt))
    precondition_failed("fp8_gemv_norm: M K sizeof(dt) above kGemvNormMaxStagedBytes");
  if (N < 1 || N >= (int64_t(1) << 31) - kWarps || K >= (int64_t(1) << 31)) precondition_failed("fp8_gemv_v2: N, K");
}

// Launches the kernel for out type TO: plain forms one block per column group (the hardware
// schedules any second wave), norm forms a one-wave grid (grid_for) whose blocks loop over groups
// (the prologue once per resident block).
template <class T, class TO, int M, int R, bool kNorm>
void launch(const void* x, const int32_t* rows, const float* nw, float eps, const uint8_t* wq, const float* w_scale,
            const void* bias, void* y, bool accumulate, int64_t N, int64_t K, cudaStream_t s) {
  const auto kernel = fp8_gemv_v2_kernel<T, TO, M, R, kNorm>;
  constexpr int W = kBlockWarps<kNorm>;
  const size_t smem = kNorm ? static_cast<size_t>(M * K) * sizeof(T) : 0;
  const int64_t groups = (N + W - 1) / W;
  // grid_for's occupancy query assumes kThreads a block: the norm forms only (W == kWarps).
  static_assert(!kNorm || W == kWarps, "grid_for sizes blocks of kThreads");
  const unsigned grid = kNorm ? grid_for(reinterpret_cast<const void*>(kernel), smem, groups) : blocks(N, W);
  // The weight heads asked of L2 before the staging (norm forms; plain launches: a PDL launch's
  // bytes only, as gemv.cu's plain kernel). K bytes a row.
  const int64_t first_rows = R * std::min<int64_t>(N, int64_t(grid) * W);
  const int prefetch = kNorm ? head_prefetch(first_rows, K) : pdl_row_prefetch(first_rows, K);
  launch_pdl(kernel, grid, 32 * W, smem, s, x, rows, nw, eps, wq, w_scale, static_cast<const TO*>(bias),
             static_cast<TO*>(y), accumulate, static_cast<int>(N), static_cast<int>(K), prefetch);
}

template <bool kNorm>
void gemv_any(const void* x, const int32_t* rows, const float* nw, float eps, const uint8_t* wq, const float* w_scale,
              DType dt, const void* bias, void* y, DType out_dt, bool accumulate, int64_t M, int64_t N, int64_t K,
              cudaStream_t s) {
  check_shape(M, N, K, dt, kNorm);
  if (out_dt != dt && out_dt != DType::F32) precondition_failed("fp8_gemv_v2: output in the input's type or F32");
  dispatch_half(dt, [&](auto t) {
    using T = decltype(t);
    dispatch_rows(M, [&](auto r) {
      constexpr int MR = decltype(r)::value;
      if (out_dt == DType::F32)
        launch<T, float, MR, 1, kNorm>(x, rows, nw, eps, wq, w_scale, bias, y, accumulate, N, K, s);
      else
        launch<T, T, MR, 1, kNorm>(x, rows, nw, eps, wq, w_scale, bias, y, accumulate, N, K, s);
    });
  });
  VLM_CUDA_CHECK_LAUNCH();
}

template <bool kNorm>
void silu_mul_any(const void* x, const int32_t* rows, const float* nw, float eps, const uint8_t* wq,
                  const float* w_scale, DType dt, const void* bias, void* out, int64_t M, int64_t I, int64_t K,
                  cudaStream_t s) {
  check_shape(M, 2 * I, K, dt, kNorm);
  dispatch_half(dt, [&](auto t) {
    using T = decltype(t);
    dispatch_rows(M, [&](auto r) {
      constexpr int MR = decltype(r)::value;
      launch<T, T, MR, 2, kNorm>(x, rows, nw, eps, wq, w_scale, bias, out, false, I, K, s);
    });
  });
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool fp8_gemv_norm_supported(int64_t M, int64_t K, DType dt) {
  return fp8_gemv_supported(M, K, dt) && M * K * static_cast<int64_t>(dtype_size(dt)) <= kGemvNormMaxStagedBytes;
}

void fp8_gemv_v2(const void* x, const uint8_t* wq, const float* w_scale, DType dt, const void* bias, void* y,
                 DType out_dt, bool accumulate, int64_t M, int64_t N, int64_t K, cudaStream_t s) {
  gemv_any<false>(x, nullptr, nullptr, 0.f, wq, w_scale, dt, bias, y, out_dt, accumulate, M, N, K, s);
}

void fp8_gemv_silu_mul_v2(const void* x, const uint8_t* wq, const float* w_scale, DType dt, const void* bias,
                          void* out, int64_t M, int64_t I, int64_t K, cudaStream_t s) {
  silu_mul_any<false>(x, nullptr, nullptr, 0.f, wq, w_scale, dt, bias, out, M, I, K, s);
}

void fp8_gemv_norm(const float* x, const int32_t* rows, const float* norm_w, float eps, const uint8_t* wq,
                   const float* w_scale, DType dt, const void* bias, void* y, DType out_dt, bool accumulate, int64_t M,
                   int64_t N, int64_t K, cudaStream_t s) {
  gemv_any<true>(x, rows, norm_w, eps, wq, w_scale, dt, bias, y, out_dt, accumulate, M, N, K, s);
}

void fp8_gemv_silu_mul_norm(const float* x, const int32_t* rows, const float* norm_w, float eps, const uint8_t* wq,
                            const float* w_scale, DType dt, const void* bias, void* out, int64_t M, int64_t I,
                            int64_t K, cudaStream_t s) {
  silu_mul_any<true>(x, rows, norm_w, eps, wq, w_scale, dt, bias, out, M, I, K, s);
}

}  // namespace vlm::cuda
