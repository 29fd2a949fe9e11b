// The W8A16 product of decode steps of a few rows (issue 43): y [M, N] = (x [M, K] . fp8(wq [N, K])^T)
// * w_scale[n] (+ bias[n]) (+ y), x BF16 as it is (no activation quantization: the numerics of
// fp8_gemv, kernels/cuda/gemm/fp8_gemv.h, for any M up to kW8a16MaxRows), f32 accumulation.
// How: mma.sync m16n8k16 on bf16, the weight rows as the 16-row side and the tokens as the 8
// columns (the MoE tensor-core GEMV's layout, kernels/cuda/moe/moe_grouped_mma_gemv.cu). A block of
// 4 warps owns 32 weight rows (two m16 tiles) and splits its K range over its warps in chunks of 64
// (chunk c to warp c % 4); lane (g = lane / 4, t = lane % 4) streams 16 bytes of weight rows g and
// g + 8 of each tile at k = 64c + 16t (past L1, 2 chunks in flight) and 32 bytes of token g's x row
// at the same k (through L1: the block's warps share them). The E4M3 bytes become bf16 exactly in
// registers: the byte's 7 magnitude bits placed under bf16's sign, exponent and mantissa give the
// value times 2^-120 (normal and subnormal alike), one bf16 multiply by 2^120 restores it exactly
// (E4M3's range 2^-9..448 lies inside bf16's normal range). Element 4s + j of a lane's 16 is
// k-slot 2t + (j & 1) + 8 (j >> 1) of mma step s, on both operands: a permutation of k, so the dot
// products are those of the naive reference up to f32 summation order. Tokens go 8, 16, 32 or 64
// at a time (ceil(M / 8) groups of 8 rounded up to a power of two; groups past M skipped). Where
// one pass over the rows leaves the GPU's resident blocks idle, K is split across blocks too: the
// splits write unscaled f32 partial sums [S, M, N] and a second kernel adds them in split order
// (deterministic) and applies the epilogue; unsplit, the epilogue runs in the GEMM kernel: the
// warps' sums meet in shared memory (summed in warp order), then * w_scale, + bias, + y, rounded
// to out_dt once.
// Contract: device pointers, 16-byte aligned; fp8_w8a16_supported(M, K) (1 <= M <= 64,
// K % 16 == 0); x BF16; out_dt BF16 or F32; bias [N] of out_dt or null; `partial` holds
// fp8_w8a16_partial_floats(M, N, K) f32 (null where that is 0). Enqueued on `s`; no allocation,
// no synchronization (the split decision queries the device's properties and, once per kernel,
// its occupancy). fp8_w8a16_naive: the reference (one thread per output, k in order, fmaf in f32).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/core/dtype.h"

namespace vlm::cuda {

constexpr int64_t kW8a16MaxRows = 64;

bool fp8_w8a16_supported(int64_t M, int64_t K);

// The partial-sum floats the product needs for `cols` output columns (N; 2I for silu_mul): S * M *
// cols when K is split S ways, 0 when it runs unsplit.
int64_t fp8_w8a16_partial_floats(int64_t M, int64_t cols, int64_t K, bool silu_mul = false);

void fp8_w8a16_gemm(const void* x /*[M,K] BF16*/, const uint8_t* wq /*[N,K]*/, const float* w_scale /*[N]*/,
                    const void* bias /*[N] out_dt or null*/, void* y /*[M,N]*/, DType out_dt, bool accumulate,
                    int64_t M, int64_t N, int64_t K, float* partial /*[S,M,N] or null*/, cudaStream_t s);

// wq [2I, K] gate rows then up rows, w_scale [2I], bias [2I] BF16 or null; out [M, I] BF16 =
// silu(round(g)) * round(u), g / u the scaled sums + bias (as fp8_gemv_silu_mul and ops_cuda's
// silu_mul over the rounded product). A block owns 16 gate rows and the 16 matching up rows.
void fp8_w8a16_gemm_silu_mul(const void* x /*[M,K] BF16*/, const uint8_t* wq /*[2I,K]*/, const float* w_scale /*[2I]*/,
                             const void* bias /*[2I] BF16 or null*/, void* out /*[M,I] BF16*/, int64_t M, int64_t I,
                             int64_t K, float* partial /*[S,M,2I] or null*/, cudaStream_t s);

void fp8_w8a16_naive(const void* x /*[M,K] BF16*/, const uint8_t* wq /*[N,K]*/, const float* w_scale /*[N]*/,
                     const void* bias /*[N] out_dt or null*/, void* y /*[M,N]*/, DType out_dt, bool accumulate,
                     int64_t M, int64_t N, int64_t K, cudaStream_t s);

}  // namespace vlm::cuda
