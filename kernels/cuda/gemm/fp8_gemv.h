// Decode GEMVs over FP8 E4M3 weights with per-output-channel scales (W8A16): y[M, N] =
// (x[M, K] . fp8(wq[N, K])^T) * w_scale[N] (+ bias[N]) (+ y), M <= kGemvMaxRows, x in BF16 or F16.
// As gemv.h's kernels: one warp owns one output column and streams its weight row in 16-byte
// loads that bypass L1 (16 weights a load: half the bytes of the 16-bit GEMV per column), the
// weights widened to f32 exactly (E4M3 -> f16 -> f32), the dot in f32, the scale applied once
// after the warp's sum, then bias / residual, rounded to out_dt once.
// Contract: device pointers, 16-byte aligned; K % 16 == 0 (fp8_gemv_supported); out_dt dt or F32;
// bias out_dt or null. fp8_gemv_silu_mul: wq [2I, K] gate rows then up rows, scales [2I];
// out[m, i] = silu(round_dt(g)) * round_dt(u) with g, u the scaled dots + bias (gemv.h's).
// The naive references (one thread per output, k in order) are what the tests compare with.
// fp8_gemv_v2.h: the same sums with 8 loads a lane in flight, and the RMS pre-norm folded in (the
// model's few-row path under VLM_FP8_GEMV_V2 / VLM_FP8_GEMV_NORM).
// Fp8GemvForm (same bits either way: each lane sums the same vectors in the same order):
//  - Simple (session 15's kernels): one warp per column, grid ceil(N / 8) blocks, kUnroll (4)
//    loads per row and lane issued, then summed, then the next 4.
//  - Pipelined: a streaming grid of at most the GPU's resident warps (cudaOccupancy), each warp
//    owning ceil(N / resident warps) columns and keeping 8 loads (4 per row of the gate/up pair)
//    in flight in a ring of registers across its columns, refilling each slot as it is consumed.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/core/dtype.h"

namespace vlm::cuda {

bool fp8_gemv_supported(int64_t M, int64_t K, DType dt);

enum class Fp8GemvForm { Simple, Pipelined };

void fp8_gemv(const void* x /*[M,K]*/, const uint8_t* wq /*[N,K]*/, const float* w_scale /*[N]*/, DType dt,
              const void* bias /*[N] or null*/, void* y /*[M,N]*/, DType out_dt, bool accumulate, int64_t M, int64_t N,
              int64_t K, cudaStream_t s, Fp8GemvForm form = Fp8GemvForm::Pipelined);
void fp8_gemv_silu_mul(const void* x /*[M,K]*/, const uint8_t* wq /*[2I,K]*/, const float* w_scale /*[2I]*/, DType dt,
                       const void* bias /*[2I] or null*/, void* out /*[M,I]*/, int64_t M, int64_t I, int64_t K,
                       cudaStream_t s, Fp8GemvForm form = Fp8GemvForm::Pipelined);

void fp8_gemv_naive(const void* x, const uint8_t* wq, const float* w_scale, DType dt, const void* bias, void* y,
                    DType out_dt, bool accumulate, int64_t M, int64_t N, int64_t K, cudaStream_t s);
void fp8_gemv_silu_mul_naive(const void* x, const uint8_t* wq, const float* w_scale, DType dt, const void* bias,
                             void* out, int64_t M, int64_t I, int64_t K, cudaStream_t s);

}  // namespace vlm::cuda
