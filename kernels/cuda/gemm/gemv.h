// Matrix-vector products for the decode step's few rows: y[M, N] = x[M, K] . w[N, K]^T (+ bias[N])
// (+ y), row-major, with M <= kGemvMaxRows and 16-bit inputs (BF16 or F16). At M = 1 a step streams
// every weight once, so these layers run at the memory's speed only if the weight stream does:
// cuBLAS's bf16 GEMV reaches 1.1-1.4 TB/s on Qwen2-7B's 3584-wide q/k/v and o projections on an
// H100 (bench/RESULTS.md), far from the ~3 TB/s copy rate. Here one warp owns one output column n
// (a row of w): it streams that row in 16-byte loads, four in flight per lane, that bypass L1
// (the weights are read once), multiplies them with the M rows of x (16-byte loads kept in L1,
// shared by the warps of the block), sums in f32, reduces across the warp and applies the
// epilogue. Enough warps per SM are resident (~27 at N = 3584) to keep the memory busy.
//
// Contract (as CublasLtGemm::linear, which serves every other case):
//  - all pointers are device pointers, 16-byte aligned; K % 8 == 0 (gemv_supported says whether
//    the shape and types qualify); nothing synchronizes or allocates; work enqueued on `s`.
//  - inside an active PdlScope (kernels/cuda/core/pdl.h) gemv and gemv_silu_mul launch with
//    programmatic dependent launch: part of each weight row is asked of L2 before the wait for the
//    kernel before, x is read after it (the same results).
//  - x, w: dt (BF16 or F16); y: out_dt (dt or F32); bias: out_dt, or null; accumulate: y += result
//    (the residual add; y read in out_dt). Arithmetic f32, the result rounded to out_dt once.
//  - gemv_silu_mul: w [2I, K] holds the gate rows then the up rows; out[m, i] =
//    silu(g) * u with g = round_dt(x_m . w_i + bias_i), u = round_dt(x_m . w_{I+i} + bias_{I+i})
//    (the values the unfused path stores before silu_mul), rounded to dt; bias dt or null.
// The naive references (one thread per output element, k in order) are what the tests compare with.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/core/dtype.h"

namespace vlm::cuda {

constexpr int64_t kGemvMaxRows = 4;

bool gemv_supported(int64_t M, int64_t K, DType dt);

void gemv(const void* x /*[M,K]*/, const void* w /*[N,K]*/, DType dt, const void* bias /*[N] or null*/,
          void* y /*[M,N]*/, DType out_dt, bool accumulate, int64_t M, int64_t N, int64_t K, cudaStream_t s);
void gemv_silu_mul(const void* x /*[M,K]*/, const void* w /*[2I,K]*/, DType dt, const void* bias /*[2I] or null*/,
                   void* out /*[M,I]*/, int64_t M, int64_t I, int64_t K, cudaStream_t s);

void gemv_naive(const void* x /*[M,K]*/, const void* w /*[N,K]*/, DType dt, const void* bias /*[N] or null*/,
                void* y /*[M,N]*/, DType out_dt, bool accumulate, int64_t M, int64_t N, int64_t K, cudaStream_t s);
void gemv_silu_mul_naive(const void* x /*[M,K]*/, const void* w /*[2I,K]*/, DType dt, const void* bias /*[2I]*/,
                         void* out /*[M,I]*/, int64_t M, int64_t I, int64_t K, cudaStream_t s);

}  // namespace vlm::cuda
