// The FP8 product of decode steps of several rows on Hopper's FP8 wgmma (issue 43: 64 sequences at
// >= 60 % of HBM): y [M, N] = (xq [M, K] . wq [N, K]^T) * x_scale[m] * w_scale[n] (+ bias[n]) (+ y),
// both operands E4M3 with per-row scales (W8A8: the numerics of CublasLtGemm::linear_fp8 and of its
// reference fp8_gemm_naive in fp8_quantize.h), f32 accumulation, for 1 <= M <= kFp8TileMaxRows.
// sm_90a only (wgmma): callers check the device (require_fp8_gpu refuses non-Hopper FP8 GPUs).
// Why wgmma: mma.sync's m16n8k32 E4M3 is not native on sm_90 (the compiler emulates it through f16;
// NVIDIA/cutlass issue 1986): session 16's mma.sync kernel read gate/up at 26 % of 4.8 TB/s at
// M = 64 (bench/results_raw/s17/callD/fp8_linear.txt) and was removed in session 20.
// How: Hopper's FP8 warpgroup MMA (wgmma m64nNk32 e4m3, N = 8 ceil(M / 8) tokens; swap-AB: the
// weights are the 64-row A operand, the tokens B), both operands K-major in 128-byte-swizzled
// shared memory. A block (one warpgroup) owns 128 weight rows (silu: 64 gate rows and their 64 up
// rows) and all M tokens; each 128-column k-step of both is copied with cp.async (16 bytes a
// thread, L2 only), kFp8TileStages - 1 steps ahead (48 KB of weights in flight a block, two or
// three blocks an SM). Each step's 4 k32 wgmmas accumulate into fresh registers that are added to
// f32 sums (no tensor-core accumulation chain longer than 128 products). K is split across
// blocks where one pass leaves the GPU's resident blocks idle (a time model: fp8_tile_gemm.cu),
// the splits' partial sums reduced in split order (deterministic).
//  - fp8_tile_gemm: y out_dt BF16 or F32; bias [N] BF16 or null.
//  - fp8_tile_gemm_silu_mul: wq [2I, K] gate rows then up rows, scales [2I], bias [2I] BF16 or
//    null; out [M, I] BF16 = silu(round(g)) * round(u), g and u the scaled sums + bias (ops_cuda's
//    silu_mul over the rounded GEMM output).
// Contract: device pointers, 16-byte aligned; fp8_tile_supported(M, K) (K % 64 == 0, 1 <= M <= 64;
// a K % 128 == 64 tail is zero-filled);
// `partial` holds fp8_tile_partial_floats(M, cols, K, silu) f32 (null where that is 0). Enqueued on
// `s`; no allocation, no synchronization (the first launch on a device sets the kernel's dynamic
// shared-memory limit; the split decision queries the device's properties and, once per kernel,
// its occupancy).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/core/dtype.h"

namespace vlm::cuda {

constexpr int64_t kFp8TileMaxRows = 64;
constexpr int kFp8TileStages = 4;

bool fp8_tile_supported(int64_t M, int64_t K);

// The partial-sum floats the product needs for `cols` output columns (N; 2I for silu_mul): S * M *
// cols when K is split S ways, 0 when it runs unsplit.
int64_t fp8_tile_partial_floats(int64_t M, int64_t cols, int64_t K, bool silu_mul);

// The number of K splits the product takes (1: unsplit), for benches and logs.
int fp8_tile_splits(int64_t M, int64_t cols, int64_t K, bool silu_mul);

// Benches and tuning only: S > 0 forces S splits (clamped to 16 and to K / 64) in place of the
// model's choice, for every later call in the process; 0 restores the model. Set it before sizing
// `partial` (fp8_tile_partial_floats follows it). Not thread-safe against products in flight.
void fp8_tile_set_split_override(int S);

void fp8_tile_gemm(const uint8_t* xq /*[M,K]*/, const float* x_scale /*[M]*/, const uint8_t* wq /*[N,K]*/,
                   const float* w_scale /*[N]*/, const void* bias /*[N] BF16 or null*/, void* y /*[M,N]*/,
                   DType out_dt, bool accumulate, int64_t M, int64_t N, int64_t K, float* partial, cudaStream_t s);

void fp8_tile_gemm_silu_mul(const uint8_t* xq /*[M,K]*/, const float* x_scale /*[M]*/, const uint8_t* wq /*[2I,K]*/,
                            const float* w_scale /*[2I]*/, const void* bias /*[2I] BF16 or null*/,
                            void* out /*[M,I] BF16*/, int64_t M, int64_t I, int64_t K, float* partial, cudaStream_t s);

}  // namespace vlm::cuda
