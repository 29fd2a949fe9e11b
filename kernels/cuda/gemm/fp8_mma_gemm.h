// The FP8 product of decode steps of several rows (issue 43: 64 sequences read the FP8 weights
// once): y [M, N] = (xq [M, K] . wq [N, K]^T) * x_scale[m] * w_scale[n] (+ bias[n]) (+ y), both
// operands E4M3 with per-row scales (W8A8: the numerics of CublasLtGemm::linear_fp8 and of its
// reference fp8_gemm_naive in fp8_quantize.h), for 1 <= M <= kFp8MmaMaxRows.
// How: warps of mma.sync m16n8k32 (E4M3 in, f32 accumulation on the tensor cores). A warp owns 16
// weight rows and all M tokens (ceil(M / 8) tiles of 8), streams its rows in 16-byte loads that
// bypass L1, kept 4 k-steps of 64 columns ahead in registers, and reads x through L1 (the block's
// 4 warps read the same x columns). Each lane's 16 weight bytes and 16 x bytes of a 64-column step
// feed two mma k-chunks directly: the k order inside a step is permuted identically on both
// operands, so no shuffles. Where one pass over the rows leaves the GPU's resident blocks idle, K
// is split: the splits write unscaled f32 partial sums [S, M, cols] and a second kernel adds them
// in split order (deterministic) and applies the epilogue; unsplit, the epilogue runs in the GEMM.
//  - fp8_mma_gemm: y out_dt BF16 or F32; bias [N] BF16 or null (cuBLASLt's FP8 bias type).
//  - fp8_mma_gemm_silu_mul: wq [2I, K] gate rows then up rows, scales [2I], bias [2I] BF16 or
//    null; out [M, I] BF16 = silu(round(g)) * round(u), g and u the scaled sums + bias (ops_cuda's
//    silu_mul over the rounded GEMM output).
// Contract: device pointers, 16-byte aligned; fp8_mma_supported(M, K) (K % 64 == 0, M <= 64);
// `partial` holds fp8_mma_partial_floats(M, cols, K, silu) f32 (null where that is 0). Enqueued
// on `s`; no allocation, no synchronization (the split decision queries the device's properties
// and, once per kernel, its occupancy).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/core/dtype.h"

namespace vlm::cuda {

constexpr int64_t kFp8MmaMaxRows = 64;

bool fp8_mma_supported(int64_t M, int64_t K);

// The partial-sum floats the product needs for `cols` output columns (N; 2I for silu_mul): S * M *
// cols when K is split S ways, 0 when it runs unsplit.
int64_t fp8_mma_partial_floats(int64_t M, int64_t cols, int64_t K, bool silu_mul);

void fp8_mma_gemm(const uint8_t* xq /*[M,K]*/, const float* x_scale /*[M]*/, const uint8_t* wq /*[N,K]*/,
                  const float* w_scale /*[N]*/, const void* bias /*[N] BF16 or null*/, void* y /*[M,N]*/,
                  DType out_dt, bool accumulate, int64_t M, int64_t N, int64_t K, float* partial, cudaStream_t s);

void fp8_mma_gemm_silu_mul(const uint8_t* xq /*[M,K]*/, const float* x_scale /*[M]*/, const uint8_t* wq /*[2I,K]*/,
                           const float* w_scale /*[2I]*/, const void* bias /*[2I] BF16 or null*/,
                           void* out /*[M,I] BF16*/, int64_t M, int64_t I, int64_t K, float* partial, cudaStream_t s);

}  // namespace vlm::cuda
