// The GPU kernels of the mixture-of-experts block (MoeSpec, model/layers/layer_specs.h), in the
// order CudaLayers' MoE layer (model/layers/cuda/cuda_moe.h) runs them on one stream, none of
// which synchronizes, allocates or reads device data on the host (so a decode step that runs
// them is captured in a CUDA graph; every grid is sized from host-known T, P = T*k and E):
//  1. moe_route: per token, softmax over the E router logits (f32), the top k (ties: the lower
//     expert), their weights (divided by their sum with norm_topk), the k choices written in
//     increasing expert index (the CPU's combine order).
//  2. moe_sort (1. and 2. in one launch for few tokens: moe_route_sort): the P = T*k (token,
//     choice) pairs, pair p = t*k + j, grouped by expert into slots
//     (expert e's slots [offsets[e], offsets[e+1]), pairs ascending within an expert, as the
//     CPU groups them) with both directions of the permutation, and each expert's first tile of
//     kMoeTileRows slots (tile_starts) for the grouped GEMM.
//  3. moe_grouped (twice): per slot r of expert e, out[r] = x[row(r)] W_e^T: the gate|up product
//     with SiLU·mul fused (x = the normed tokens, row(r) = pair_of_slot[r] / k; W_e = rows
//     [0, 2I) of gate_up [E, 2I, C]: out[r, i] = silu(round(g_i)) * round(u_i), g_i from row i,
//     u_i from row I + i, rounded to dt as an unfused GEMM would store them), then the down
//     product (x = that [P, I], row(r) = r, W_e = down [E, C, I]). One launch covers every expert:
//     moe_grouped runs bf16/f16 tiles of kMoeTileRows slots on tensor cores (mma.sync, a 4-stage
//     cp.async pipeline) over a grid of moe_max_tiles(P, E) row tiles, the tiles past tile_starts[E] exiting at once (no host-known
//     per-expert counts); moe_grouped_gemv, for few pairs per expert (decode), gives each of its
//     min(P, E) columns of blocks to an expert with pairs (moe_sort's `active` list; the columns
//     past it exit at once), so a step reads only the chosen experts' weights, each weight row
//     once per 8 of the expert's pairs; moe_grouped_mma_gemv (the decode default, the warp GEMV
//     kept for comparison: VLM_MOE_GEMV=old) does the same on tensor cores, blocks over (32 weight
//     rows, expert with pairs), K split over the block's warps, each weight row read once per 32
//     of the expert's pairs (moe_grouped_mma_gemv.cu says why and how).
//  4. moe_combine: y[t] (+)= sum over j (increasing expert) of weight[t, j] * out[slot_of_pair[t*k + j]]
//     (the sum in f32, then added to y: the CPU's order).
// For a few tokens (decode) CudaMoe runs moe_decode.h's forms instead: the router product with 1.
// and 2. in one launch, and 3. as pair GEMVs with 4. folded into the down product.
// Every optimized kernel has a naive reference (*_naive: one thread per token, per pair, or per
// output element, sums in index order); f32 runs the naive products (the exact path's speed does
// not matter). Products sum in f32 and round to dt once. Pointers are device pointers; x, w and
// out 16-byte aligned for the 16-byte paths.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/core/dtype.h"
#include "kernels/cuda/moe/moe_limits.h"

namespace vlm::cuda {

constexpr int kMoeTileRows = 128;         // slots per row tile of moe_grouped
// The GEMV forms run when P <= this many pairs per expert on average (P <= k * E): the warp GEMV
// reads each weight row once per 8 of an expert's pairs and pays CUDA-core FMAs per pair; the
// tensor-core GEMV once per 32 pairs, so it stays ahead of the 128-row tiles (mostly padding at
// ~16 pairs per expert) to ~16 pairs per expert (bench_cuda_moe measures the crossover).
constexpr int64_t kMoeGemvPairsPerExpert = 8, kMoeMmaGemvPairsPerExpert = 16;

// 1 <= K <= min(E, kMoeMaxTopK), E <= kMoeMaxExperts.
void moe_route(const float* logits /*[T,E]*/, int64_t T, int64_t E, int64_t K, bool norm_topk,
               int32_t* expert /*[T,K]*/, float* weight /*[T,K]*/, cudaStream_t s);
void moe_route_naive(const float* logits /*[T,E]*/, int64_t T, int64_t E, int64_t K, bool norm_topk,
                     int32_t* expert /*[T,K]*/, float* weight /*[T,K]*/, cudaStream_t s);

struct MoeSorted {
  int32_t* offsets = nullptr;       // [E+1] expert e's slots [offsets[e], offsets[e+1]); offsets[E] = P
  int32_t* tile_starts = nullptr;   // [E+1] expert e's row tiles [tile_starts[e], tile_starts[e+1])
  int32_t* active = nullptr;        // [E+1] the experts with pairs, increasing, then active[E] = their count
  int32_t* pair_of_slot = nullptr;  // [P]
  int32_t* slot_of_pair = nullptr;  // [P]
};

// moe_route then moe_sort (the same outputs, bit for bit): for T <= kMoeRouteSortMaxTokens one
// block of one launch (decode: a launch fewer per layer), else the two kernels. The one block holds
// up to 64 tokens (a token mask per expert: 64 bits) but is slower than the two kernels past ~16
// (H200, 128 experts, top 8: T = 1 / 4 / 16 / 64 one block 6.8 / 7.0 / 11.8 / 39.0 us, two kernels
// 10.4 / 9.5 / 11.1 / 10.4 us; session 17, bench_cuda_moe), so it runs up to 8 tokens
// (kMoeRouteSortMaxTokens, moe_limits.h).
void moe_route_sort(const float* logits /*[T,E]*/, int64_t T, int64_t E, int64_t K, bool norm_topk,
                    int32_t* expert /*[T,K]*/, float* weight /*[T,K]*/, const MoeSorted& sorted, cudaStream_t s);

// expert [P] in [0, E). moe_sort: moe_sort_chunked for P >= kMoeSortChunk, else
// moe_sort_per_expert (the same outputs, bit for bit). moe_sort_per_expert: a block per expert,
// each reading all P choices (115 us at P = 65,536, E = 128 on an H200, session 17);
// moe_sort_chunked (P >= kMoeSortChunk): three launches over chunks of kMoeSortChunk pairs
// (counts, one scan, the slots; moe_sort.cu says how), each reading the choices once.
constexpr int64_t kMoeSortChunk = 1024;
void moe_sort(const int32_t* expert /*[P]*/, int64_t P, int64_t E, const MoeSorted& out, cudaStream_t s);
void moe_sort_per_expert(const int32_t* expert /*[P]*/, int64_t P, int64_t E, const MoeSorted& out, cudaStream_t s);
void moe_sort_chunked(const int32_t* expert /*[P]*/, int64_t P, int64_t E, const MoeSorted& out, cudaStream_t s);
void moe_sort_naive(const int32_t* expert /*[P]*/, int64_t P, int64_t E, const MoeSorted& out, cudaStream_t s);

// An upper bound of tile_starts[E] (sum over e of ceil(count_e / kMoeTileRows)) for P pairs.
inline int64_t moe_max_tiles(int64_t P, int64_t E) { return P / kMoeTileRows + E; }

// One grouped product (see 3. above). gated: w [E, 2N, K] (gate rows then up rows of each
// expert), out [P, N] the SiLU·mul; else w [E, N, K], out [P, N]. x_rows null: row(r) = r
// (x [P, K]); else row(r) = x_rows[r] / x_div (x [rows, K]).
struct MoeGroupedArgs {
  const void* x = nullptr;
  const int32_t* x_rows = nullptr;
  int64_t x_div = 1;
  const void* w = nullptr;
  void* out = nullptr;
  const int32_t* offsets = nullptr;      // [E+1] (moe_sort)
  const int32_t* tile_starts = nullptr;  // [E+1] (moe_sort; moe_grouped only)
  const int32_t* active = nullptr;       // [E+1] (moe_sort; moe_grouped_gemv only)
  int64_t P = 0, E = 0, N = 0, K = 0;
  bool gated = false;
  // moe_grouped only: its form (MoeTiles); 0: VLM_MOE_TILES=old|v2|v2c|v3 in the environment
  // (read once), else kMoeTilesDefault.
  int tile_form = 0;
  // moe_grouped_mma_gemv only: weight rows per block, 32 or 16 (twice the blocks, for a few
  // tokens; the same outputs bit for bit); 0: 16 with VLM_MOE_MMA_ROWS=16 in the environment
  // (read once), else 32.
  int mma_rows = 0;
};

// moe_grouped's forms: kBM x kBN = 128 x 128 tiles, 8 warps, mma.sync, ldmatrix from swizzled
// shared memory in all. old: 2 cp.async stages of kBK = 32 (before session 17); v2: 4 stages of
// 32 (session 17: gate|up 2.00 ms + down 1.26 ms at T = 8192, ~200 TFLOP/s on an H200); v2c: v2
// with the column tiles fastest in the grid (x read once per row tile, not once per column
// tile); v3: v2c with 3 stages of kBK = 64 (half the barriers per k, 96 KB: 2 blocks per SM).
// Every form sums k ascending: the same outputs bit for bit.
enum MoeTiles : int { kMoeTilesOld = 1, kMoeTilesV2 = 2, kMoeTilesV2c = 3, kMoeTilesV3 = 4 };
// v3: 2,696 us a layer at 8,192 tokens against v2's 3,128 and v2c's 2,973 (H200, session 17, bench_cuda_moe).
constexpr int kMoeTilesDefault = kMoeTilesV3;

// 16-bit dt and K % 8 == 0 (16-byte rows): what moe_grouped and moe_grouped_gemv take.
bool moe_grouped_fast_supported(int64_t K, DType dt);
void moe_grouped(const MoeGroupedArgs& a, DType dt, cudaStream_t s);
void moe_grouped_gemv(const MoeGroupedArgs& a, DType dt, cudaStream_t s);
void moe_grouped_mma_gemv(const MoeGroupedArgs& a, DType dt, cudaStream_t s);
void moe_grouped_naive(const MoeGroupedArgs& a, DType dt, cudaStream_t s);

// out [P, C] in dt; weight [T, K] f32; y [T, C] f32.
void moe_combine(const void* out, DType dt, const int32_t* slot_of_pair /*[T*K]*/, const float* weight, float* y,
                 bool accumulate, int64_t T, int64_t K, int64_t C, cudaStream_t s);
void moe_combine_naive(const void* out, DType dt, const int32_t* slot_of_pair /*[T*K]*/, const float* weight,
                       float* y, bool accumulate, int64_t T, int64_t K, int64_t C, cudaStream_t s);

// dst [E, Cc, R] = each slice of src [E, R, Cc] transposed (the released Qwen3-VL-MoE expert
// layout to ours at load), elements of dt's size (2 or 4 bytes).
void moe_transpose_slices(const void* src, void* dst, int64_t E, int64_t R, int64_t Cc, DType dt, cudaStream_t s);

}  // namespace vlm::cuda
