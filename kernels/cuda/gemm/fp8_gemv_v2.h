// The FP8 decode GEMVs, second form (issue 43: one sequence's decode step at <= 0.6x bf16's time),
// for steps of 1..kGemvMaxRows rows over E4M3 weights with per-output-channel scales (W8A16, as
// fp8_gemv.h). Two changes against fp8_gemv's Simple form, each switchable apart:
//  1. More bytes in flight: each lane keeps 8 weight loads of 16 bytes in flight for the plain
//     product (fp8_gemv's 4), 4 per row for the gate/up pair (8 in all, as before), so a row of
//     K = 3584 (224 vectors, 7 a lane) is one round trip, not two. The session-20 CUPTI step
//     (Qwen2-7B, fp8, 1 at 1K) read qkv / o / down at 2.76 TB/s in the Simple form against 3.87 TB/s
//     for gate/up (8 loads a lane); this gives the plain product the same depth.
//  2. The RMS pre-norm folded in (fp8_gemv_norm / fp8_gemv_silu_mul_norm): as gemv_norm.h does for
//     the 16-bit GEMVs, every block reads the M residual rows x (f32, from L2), computes their
//     inverse RMS and stages h = round_dt(norm_w * x * rsqrt(mean(x^2) + eps)) in shared memory
//     (gemv_norm_stage.cuh's stage_normalized: ops_cuda's rms_norm order for K <= 4096), then the
//     warps stream the weights against it. Saves the two rms_norm launches of each layer (56 x 4.3
//     us a step on Qwen2-7B). Blocks loop over column groups in a grid of one wave (grid_for), so the
//     prologue is paid once per resident block.
// Each lane sums the same 16-byte vectors in the same order as fp8_gemv's (j, j + 32, ... of its
// column), the warp sum, scale and epilogue are the same: fp8_gemv_v2 equals fp8_gemv bit for bit,
// and fp8_gemv_norm equals rms_norm (into a dt buffer) then fp8_gemv bit for bit at K <= 4096 (above,
// rms_norm's scalar kernel sums the squares in another order: the last bit of the inverse RMS may
// differ). Tests: tests/kernels/cuda/test_cuda_fp8_gemv_v2.cpp; bench: bench_cuda_fp8_linear
// ("gemv_v2", "norm_v2", "rms+simple" rows).
//
// Contract: as fp8_gemv / fp8_gemv_silu_mul (device pointers 16-byte aligned; K % 16 == 0; M in
// [1, kGemvMaxRows]; dt BF16 or F16; out_dt dt or F32; bias out_dt or null; gate/up: wq [2I, K], gate
// rows then up rows, scales [2I], bias dt [2I] or null, out [M, I] dt). The norm forms, in addition:
// x [*, K] f32 residual rows (rows: [M] device row indices into x, or null for rows 0..M-1),
// norm_w [K] f32, M K sizeof(dt) <= kGemvNormMaxStagedBytes (fp8_gemv_norm_supported); y / out must
// not overlap x. Only enqueue on `s` (capturable); inside an active PdlScope they launch with
// programmatic dependent launch (weight-head prefetch before the wait, x read after it).
//
// Switches (read by the model layer, model/layers/cuda/cuda_fp8_linear.cpp, once per process):
// VLM_FP8_GEMV_V2=0/1 (the deeper plain / gate-up GEMV for 1..4 rows), VLM_FP8_GEMV_NORM=0/1 (the
// norm folded into the FP8 GEMVs where CudaStep::fused_norm allows); unset: the defaults below.
// Measured in session 20 call M (H200, Qwen2-7B shape, FP8 weights, one sequence at 1K, two rounds):
// v2 off / norm on 2.629 / 2.629 ms, both off 2.776 / 2.798, both on 2.769 / 2.751, v2 alone 2.957 /
// 2.948: the folded norm wins, the deeper GEMV loses (qkv at M=1 9.44 vs 8.31 us, o 8.11 vs 7.38), so
// v2 is off and the norm on.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/core/dtype.h"

namespace vlm::cuda {

constexpr bool kFp8GemvV2Default = false;
constexpr bool kFp8GemvNormDefault = true;

bool fp8_gemv_norm_supported(int64_t M, int64_t K, DType dt);

void fp8_gemv_v2(const void* x /*[M,K]*/, const uint8_t* wq /*[N,K]*/, const float* w_scale /*[N]*/, DType dt,
                 const void* bias /*[N] or null*/, void* y /*[M,N]*/, DType out_dt, bool accumulate, int64_t M,
                 int64_t N, int64_t K, cudaStream_t s);
void fp8_gemv_silu_mul_v2(const void* x /*[M,K]*/, const uint8_t* wq /*[2I,K]*/, const float* w_scale /*[2I]*/,
                          DType dt, const void* bias /*[2I] or null*/, void* out /*[M,I]*/, int64_t M, int64_t I,
                          int64_t K, cudaStream_t s);

void fp8_gemv_norm(const float* x /*[*,K]*/, const int32_t* rows /*[M] or null*/, const float* norm_w /*[K]*/,
                   float eps, const uint8_t* wq /*[N,K]*/, const float* w_scale /*[N]*/, DType dt,
                   const void* bias /*[N] or null*/, void* y /*[M,N]*/, DType out_dt, bool accumulate, int64_t M,
                   int64_t N, int64_t K, cudaStream_t s);
void fp8_gemv_silu_mul_norm(const float* x /*[*,K]*/, const int32_t* rows /*[M] or null*/,
                            const float* norm_w /*[K]*/, float eps, const uint8_t* wq /*[2I,K]*/,
                            const float* w_scale /*[2I]*/, DType dt, const void* bias /*[2I] or null*/,
                            void* out /*[M,I]*/, int64_t M, int64_t I, int64_t K, cudaStream_t s);

}  // namespace vlm::cuda
