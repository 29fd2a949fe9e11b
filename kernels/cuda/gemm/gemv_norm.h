// The decode GEMVs (gemv.h) with the RMSNorm that feeds them folded in: a decode step's few rows
// otherwise pay one tiny rms_norm launch per norm (56 of ~4.5 us per step on Qwen2-7B, CUPTI,
// bench/RESULTS.md session 11). Here every block of the GEMV reads the M residual rows x (f32,
// from L2), computes their inverse RMS itself, stages the normalized rows in shared memory in dt
// and runs the GEMV's warps over them:
//   h[m, :] = round_dt(norm_w * (x[row(m), :] * rsqrt(mean(x[row(m)]^2) + eps))),  row(m) = rows ? rows[m] : m
//   gemv_norm:          y = h w^T (+ bias) (+ y)           (as gemv(h, ...))
//   gemv_silu_mul_norm: out = silu(h Wg^T + bg) * (h Wu^T + bu)  (as gemv_silu_mul(h, ...))
// The sum of squares runs in the order of ops_cuda's rms_norm for K <= 4096 (its 128-thread
// vector kernel: same partition, same tree), so there the result equals rms_norm followed by
// gemv / gemv_silu_mul bit for bit; for larger K the inverse RMS may differ in its last bit.
// Blocks loop over groups of kWarps columns, sized so the grid fits the GPU in one wave, so a
// block's prologue (2 M K f32 reads from L2) is paid once per resident block, not per column group.
//
// Contract: as gemv / gemv_silu_mul (x's rows, w, y, out, bias 16-byte aligned device pointers,
// dt BF16 or F16, K % 8 == 0, M in [1, kGemvMaxRows]), plus: x [*, K] f32 (rows: [M] device row
// indices into x, or null), norm_w [K] f32, and M K sizeof(dt) <= kGemvNormMaxStagedBytes
// (gemv_norm_supported says whether all of it holds). y must not overlap x. Only enqueues on `s`
// (capturable in a CUDA graph); inside an active PdlScope with programmatic dependent launch, as
// gemv (gemv.h). The reference is rms_norm then gemv (tests/kernels/cuda/test_cuda_gemv_norm.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/core/dtype.h"

namespace vlm::cuda {

constexpr int64_t kGemvNormMaxStagedBytes = 44 * 1024;  // the normalized rows in shared memory

bool gemv_norm_supported(int64_t M, int64_t K, DType dt);

void gemv_norm(const float* x /*[*,K]*/, const int32_t* rows /*[M] or null*/, const float* norm_w /*[K]*/, float eps,
               const void* w /*[N,K]*/, DType dt, const void* bias /*[N] or null*/, void* y /*[M,N]*/, DType out_dt,
               bool accumulate, int64_t M, int64_t N, int64_t K, cudaStream_t s);
void gemv_silu_mul_norm(const float* x /*[*,K]*/, const int32_t* rows /*[M] or null*/, const float* norm_w /*[K]*/,
                        float eps, const void* w /*[2I,K]*/, DType dt, const void* bias /*[2I] or null*/,
                        void* out /*[M,I]*/, int64_t M, int64_t I, int64_t K, cudaStream_t s);

}  // namespace vlm::cuda
