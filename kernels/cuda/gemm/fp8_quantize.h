// FP8 E4M3 on the GPU: the quantizers of the FP8 linear layers and the naive FP8 GEMM the cuBLASLt
// one (CublasLtGemm::linear_fp8) is tested against.
//  - quantize_fp8_rows: q [R, K] and scale [R] of x [R, K] (F32, BF16 or F16), one scale per row
//    (a weight's output channel at load, an activation's token per step): the bits of
//    kernels/core/fp8.h's quantize_fp8_rows, its CPU reference (scale = amax / 448, q =
//    e4m3_satfinite_rne(x * (448 / amax)); an all-zero row: scale 1, q 0). One block per row
//    (BF16/F16 rows with K % 8 == 0, x 16-byte and q 8-byte aligned: 16-byte loads, 512 threads).
//  - dequantize_fp8_blocks: out [N, K] f32 = fp8(q) * s[n / bn, k / bk] (kernels/core/fp8.h's), the
//    first half of requantizing a 128x128-block checkpoint per channel at load.
//  - fp8_gemm_naive: y [M, N] (out_dt: BF16 or F32) = sum_k fp8(xq[m,k]) fp8(wq[n,k]) (f32, k in
//    order) * x_scale[m] * w_scale[n] (+ bias [N] BF16) (+ y when accumulate): one thread per output.
// Device pointers; work enqueued on `s`; nothing synchronizes or allocates.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/core/dtype.h"

namespace vlm::cuda {

void quantize_fp8_rows(const void* x /*[R,K]*/, DType dt, int64_t R, int64_t K, uint8_t* q /*[R,K]*/,
                       float* scale /*[R]*/, cudaStream_t s);

void dequantize_fp8_blocks(const uint8_t* q /*[N,K]*/, const float* block_scale /*[ceil(N/bn),ceil(K/bk)]*/,
                           int64_t bn, int64_t bk, int64_t N, int64_t K, float* out /*[N,K]*/, cudaStream_t s);

// y [M, N] (out_dt: BF16 or F32) = (accumulate ? y : 0) + tmp [M, N] f32 * x_scale[m] * w_scale[n]
// (+ bias [N] BF16); a null x_scale / w_scale is all ones: CublasLtGemm::linear_fp8's unfused forms
// (per-row-scaled GEMM into tmp, then bias and residual; or the unscaled GEMM, then everything).
void fp8_scale_epilogue(void* y, DType out_dt, const float* tmp, const float* x_scale /*[M] or null*/,
                        const float* w_scale /*[N] or null*/, const void* bias /*[N] BF16 or null*/, bool accumulate,
                        int64_t M, int64_t N, cudaStream_t s);

void fp8_gemm_naive(const uint8_t* xq /*[M,K]*/, const float* x_scale /*[M]*/, const uint8_t* wq /*[N,K]*/,
                    const float* w_scale /*[N]*/, const void* bias /*[N] BF16 or null*/, void* y /*[M,N]*/,
                    DType out_dt, bool accumulate, int64_t M, int64_t N, int64_t K, cudaStream_t s);

}  // namespace vlm::cuda
