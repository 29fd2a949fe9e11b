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
// the splits' partial sums reduced in split order (deterministic), by a second kernel or, given
// `counters`, by the last block of each tile to finish (one launch a product; the same bits).
// Opt-in, session 20 (issue 43's fill of the small products), until measured on the H200:
//  - VLM_FP8_SPLITK_FUSED=1 (environment, read once; fp8_tile_fused_reduce_enabled): the model
//    layer passes counters, so split products reduce in their own launch (no reduce kernel, no
//    kernel boundary between the GEMM and its epilogue). Bitwise equal to the two-launch form.
//  - VLM_FP8_TILE_DEEP=1 (environment, read once; fp8_tile_set_deep overrides): for M >= 17 (token
//    tiles MT >= kFp8TileDeepMinTiles) one block an SM with 9-10 stages (deep_stages in the .cu)
//    in place of two blocks of 4: 8-9 weight steps (128-144 KB) in flight an SM instead of 6 (96
//    KB). Why: gate/up reads at 65-67 % of 4.8 TB/s where three 4-stage blocks fit an SM (M <= 16)
//    and 44-53 % where two do (M >= 17; bench/results_raw/s19/callB/fp8.txt). Same bits as the
//    4-stage form for the same split (the split model may choose another S: fp8_tile_splits).
//  - fp8_tile_gemm: y out_dt BF16 or F32; bias [N] BF16 or null.
//  - fp8_tile_gemm_silu_mul: wq [2I, K] gate rows then up rows, scales [2I], bias [2I] BF16 or
//    null; out [M, I] BF16 = silu(round(g)) * round(u), g and u the scaled sums + bias (ops_cuda's
//    silu_mul over the rounded GEMM output).
// Contract: device pointers, 16-byte aligned; fp8_tile_supported(M, K) (K % 64 == 0, 1 <= M <= 64;
// a K % 128 == 64 tail is zero-filled);
// `partial` holds fp8_tile_partial_floats(M, cols, K, silu) f32 (null where that is 0); `counters`
// null, or fp8_tile_counters(cols, silu) uint32 that are 0 before the first call and that every
// call leaves 0 (allocate zeroed once; not shared by products in flight at once). Enqueued on
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
constexpr int kFp8TileDeepMinTiles = 3;  // the deep pipeline's least ceil(M / 8)

bool fp8_tile_supported(int64_t M, int64_t K);

// The partial-sum floats the product needs for `cols` output columns (N; 2I for silu_mul): S * M *
// cols when K is split S ways, 0 when it runs unsplit.
int64_t fp8_tile_partial_floats(int64_t M, int64_t cols, int64_t K, bool silu_mul);

// The tile counters the fused reduce needs for `cols` output columns: ceil(N / 128) (silu_mul:
// ceil(I / 64), cols = 2I).
int64_t fp8_tile_counters(int64_t cols, bool silu_mul);

// The number of K splits the product takes (1: unsplit), for benches and logs.
int fp8_tile_splits(int64_t M, int64_t cols, int64_t K, bool silu_mul);

// The pipeline stages a product of M rows runs (kFp8TileStages, or the deep pipeline's), for logs.
int fp8_tile_stages(int64_t M);

// VLM_FP8_SPLITK_FUSED=1 (read once): whether callers should pass counters.
bool fp8_tile_fused_reduce_enabled();

// Tests and benches: 1 / 0 forces the deep pipeline on / off, -1 restores VLM_FP8_TILE_DEEP. Set it
// before sizing `partial`. Not thread-safe against products in flight.
void fp8_tile_set_deep(int deep);

// Benches and tuning only: S > 0 forces S splits (clamped to 16 and to K / 64) in place of the
// model's choice, for every later call in the process; 0 restores the model. Set it before sizing
// `partial` (fp8_tile_partial_floats follows it). Not thread-safe against products in flight.
void fp8_tile_set_split_override(int S);

void fp8_tile_gemm(const uint8_t* xq /*[M,K]*/, const float* x_scale /*[M]*/, const uint8_t* wq /*[N,K]*/,
                   const float* w_scale /*[N]*/, const void* bias /*[N] BF16 or null*/, void* y /*[M,N]*/,
                   DType out_dt, bool accumulate, int64_t M, int64_t N, int64_t K, float* partial, cudaStream_t s,
                   unsigned* counters = nullptr);

void fp8_tile_gemm_silu_mul(const uint8_t* xq /*[M,K]*/, const float* x_scale /*[M]*/, const uint8_t* wq /*[2I,K]*/,
                            const float* w_scale /*[2I]*/, const void* bias /*[2I] BF16 or null*/,
                            void* out /*[M,I] BF16*/, int64_t M, int64_t I, int64_t K, float* partial, cudaStream_t s,
                            unsigned* counters = nullptr);

}  // namespace vlm::cuda
