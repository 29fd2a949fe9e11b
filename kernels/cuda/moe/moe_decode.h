// The decode forms of the mixture-of-experts block for a few tokens (issue 41: one sequence's
// decode step, T = 1, 8 pairs each in its own expert), three launches per layer in place of five
// (router GEMV, moe_route_sort, gate|up, down, combine; moe_cuda.h):
//  1. moe_router_route_sort (T <= kMoeRouteSortMaxTokens): the router product logits [T, E] f32 =
//     h [T, C] W_r^T ([E, C] dt) and moe_route_sort's outputs in ONE launch. ceil(E / 8) blocks
//     of 256 threads, warp w of block b owns router row 8b + w (16-byte streamed loads, the T
//     tokens' rows through L1, the lane sums then an xor butterfly); each block fences its logits
//     and takes a ticket from `counter` (atomicAdd); the block that takes the last ticket routes
//     and sorts all T tokens (route_sort_block: the same code as moe_route_sort's one block, so the
//     choices, weights and slots equal moe_route_naive + moe_sort_naive's on these logits, bit for
//     bit) and puts the counter back to 0 (a CUDA graph replays it). The logits sum in another
//     order than the decoder's GEMV (cuda_product), so they may differ from it in the last bits.
//  2. moe_pair_gate_up (T <= kMoePairGemvMaxTokens): act [P, I] in PAIR order (pair p = t*k + j,
//     not moe_sort's slot order) = silu(round(g)) * round(u), g / u = h[t] . gate / up row n of
//     expert[p] (gate_up [E, 2I, C]). One warp per (pair, column): the gate and up rows streamed in
//     16-byte loads bypassing L1, kPairGateUpUnroll vectors of each in flight per lane (C = 2048:
//     the whole 4 KB row at once, 8 KB per warp in flight), h[t] through L1 (the block's warps
//     share it).
//  3. moe_pair_down_combine (the combine folded into the down product): y[t, c] (+)= sum over j
//     ascending (increasing expert, the combine's order) of weight[t, j] * round(act[t*k + j] .
//     down row c of expert[t*k + j]) (down [E, C, I]), the sum in f32, then added to y.
//     DETERMINISTIC: one warp owns y[t, c] and loops over the token's k pairs in a fixed order (no
//     atomics), so a run gives the same bits every time. The pairs go 4 at a time, each pair's
//     row in kPairDownUnroll 16-byte vectors per lane (I = 768: 3 per lane, 12 loads, 6 KB per
//     warp in flight).
//  3'. moe_pair_down_combine_staged (the default since session 19; VLM_MOE_DECODE=v1 runs 3.): the
//     same sums in the same order (equal bits), a block of 8 warps per (token, R = 8 columns)
//     whose threads first cp.async every byte the block needs into shared memory (the k pairs'
//     R down rows, contiguous per pair, and the token's k act rows), then warp w sums pair w
//     from shared memory and thread r < R adds column c0 + r's k outputs in increasing j
//     (moe_pair_staged.cu says why: registers no longer bound the bytes in flight).
//  2b. / 2f. (session 20, removed after call M measured them on an H200): a gate|up ring of
//     bulk-copied stages in persistent blocks (18.54 vs 2.'s 16.26 us a layer) and the gate|up and
//     down+combine in one cooperative launch (33.20 us vs 28.47 for the two) both lost.
//  3b. moe_pair_down_combine_bulk (the default since session 20: 12.21 vs 3'.'s 12.47 us, call M;
//     VLM_MOE_DOWN_BULK=0 runs 3'.; moe_limits.h's kMoeDownBulkDefault): 3'. with its shared-memory
//     fill done by the copy engine (sm_90 bulk copies: per pair one copy of its R contiguous down
//     rows and one of its act row, on one mbarrier per pair), warp w summing its pair as soon as
//     that pair has landed; 3'.'s sums in 3'.'s order (the same bits; moe_pair_bulk.cu).
//  2'. moe_pair_gate_up_staged (opt-in, VLM_MOE_DECODE=staged runs 2'. and 3'.; not measured yet):
//     2. the same way (the same bits), a block per (pair, R = 12 columns) copying the gate rows,
//     the up rows and h[t] into shared memory first (moe_pair_staged.cu).
//
// The one-token decode step of a Qwen3-30B-A3B layer (C 2048, I 768, E 128, top 8, bf16; H200:
// 132 SMs, ~4.43 TB/s measured; CudaMoe::forward, model/layers/cuda/cuda_moe.cpp), what each
// launch reads and what it waits on (stream order, no PDL in these kernels):
//  | launch | grid x threads | reads | waits on |
//  | RMSNorm (pre-norm, CudaPreNorm: cuda::rms_norm) | T rows | x 8 KB f32 + gamma 8 KB f32 | the attention's residual add |
//  | (1n. in place of the norm and 1.: 32 x 128, every block x + gamma from L2, W_r 512 KB) |
//  | 1. moe_router_route_sort | 16 x 256 | W_r 512 KB + h 4 KB; last block: logits 512 B | the norm |
//  | 2. moe_pair_gate_up | 1,536 x 128 (6,144 warps) | 8 x 1,536 rows x 4 KB = 50.3 MB | 1.'s expert [1, 8] |
//  | 3'. moe_pair_down_combine_staged | 256 x 256 (R = 8) | 8 x 2,048 rows x 1.5 KB = 25.2 MB + act 12 KB | 2.'s act, 1.'s expert / weight |
// So a layer reads ~76 MB (~17 us at the read rate; 48 layers: 0.82 ms of a step) in 4 launches, each
// waiting for the one before to drain (launch + ramp + tail ~2-3 us each, the part that does not
// shrink with the bytes). Session 18 (bench_cuda_moe T = 1, kernel rows, us): router+route+sort
// 11.37, gate|up 16.36 (69 % of the read rate), down+combine (3.) 14.67 (39 %).
// Measuring guide: bench_cuda_moe --tokens 1,2,4,8 --peak 4430 prints "kernel down_combine
// form=pair" (3.) and "form=staged" (3'.) with GB/s and % of the read rate, and "decode graph
// form=new" (three launches, 3'.) against "form=v1" (3.) and "form=old" (five launches) per layer.
// How 3. reads (why it fell short): down is 8 x 2048 rows x 1.5 KB = 25 MB over 2,048 warps (1,024
// blocks of 2; 108 registers: ~16 warps per SM, 6 KB each in flight), every warp in two dependent
// rounds of 4 pairs. gate|up (2.): 6,144 warps (1,536 blocks of 4; ptxas: 90 registers, 5 blocks =
// 20 warps per SM, ~2.3 waves of 660 blocks), each warp with its 8 KB in flight.
// The tensor-core GEMV
// (moe_grouped_mma_gemv) at T = 1 has 8 active experts x N / 32 column blocks, each warp with
// 4 chunks x 2 rows x 16 B per lane in flight (4 KB), pays a dependent index chain
// (active -> offsets -> pair_of_slot -> x) before its first weight load and 7/8 of its mma
// columns are padding; a step's combine is a further launch. Weight rows shared by two tokens of
// one step are read once per token here (through L2 the second time), so this form is for a
// few tokens only (kMoePairGemvMaxTokens; bench_cuda_moe's "decode" rows measure it against the
// old path per T).
// Contracts: dt 16-bit, C % 8 == 0, I % 8 == 0 (16-byte rows), 1 <= k <= min(E, kMoeMaxTopK),
// every pointer a device pointer, h / weights / act 16-byte aligned; expert [T, k] holds experts
// in [0, E) (moe_route's output). No host sync, no allocation (the *_naive references allocate
// nothing either): capturable in the decode CUDA graphs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/core/dtype.h"
#include "kernels/cuda/moe/moe_cuda.h"

namespace vlm::cuda {

// kMoePairGemvMaxTokens and which form runs when (moe_decode_plan): moe_limits.h.
// True when the three forms take this shape: 16-bit dt, C and I multiples of 8.
bool moe_decode_supported(int64_t C, int64_t I, DType dt);

// counter: one device u32, 0 before the call (zeroed once at allocation), 0 after it.
// 1 <= T <= kMoeRouteSortMaxTokens.
void moe_router_route_sort(const void* h /*[T,C] dt*/, const void* w_router /*[E,C] dt*/, DType dt, int64_t T,
                           int64_t E, int64_t C, int64_t K, bool norm_topk, float* logits /*[T,E]*/,
                           int32_t* expert /*[T,K]*/, float* weight /*[T,K]*/, const MoeSorted& sorted,
                           uint32_t* counter, cudaStream_t s);
// 1n. moe_norm_router_route_sort (opt-in: VLM_MOE_NORM_ROUTER=1, moe_limits.h's
// kMoeNormRouterDefault; CudaMoe with an RMSNorm pre-norm): the pre-norm folded in, so the MoE
// block's norm + router + routing + sort is ONE launch. h_out [T, C] dt = rms_norm(x [T, C] f32,
// norm_w [C] f32, eps) rounded exactly as cuda::rms_norm rounds it (the same sums in the same
// order: ops_cuda.cu's 128-thread kernel), written by block 0 for the expert GEMVs; every other
// output equals moe_router_route_sort's on that h_out, bit for bit (the same product order, the
// same routing rule and slots). ceil(E / 4) blocks of 128 threads, warp w of block b owns router
// row 4b + w with its first 8 x 16-byte vectors per lane in flight while the block normalizes
// the T rows into shared memory; the last block (ticket) routes one token per warp (logits in
// registers, the top k by warp reductions) and sorts the pairs in one warp (a prefix sum).
// Needs moe_norm_router_supported (moe_norm_router_shape_ok: T <= 8, E <= 256, C <= 4096, T x C
// x 2 <= 44 KB); counter as moe_router_route_sort's; x, norm_w, h_out, w_router 16-byte aligned.
// sorted.offsets null (session 20): the sort is skipped and `sorted` untouched (the pair GEMVs,
// T <= kMoePairGemvMaxTokens, read expert / weight only; the routing block's tail one warp and a
// barrier shorter); the other outputs as with it.
bool moe_norm_router_supported(int64_t T, int64_t E, int64_t C, int64_t K, DType dt);
void moe_norm_router_route_sort(const float* x /*[T,C]*/, const float* norm_w /*[C]*/, float eps,
                                void* h_out /*[T,C] dt*/, const void* w_router /*[E,C] dt*/, DType dt, int64_t T,
                                int64_t E, int64_t C, int64_t K, bool norm_topk, float* logits /*[T,E]*/,
                                int32_t* expert /*[T,K]*/, float* weight /*[T,K]*/, const MoeSorted& sorted,
                                uint32_t* counter, cudaStream_t s);
// The router product alone, one thread per logit, k ascending (the reference of 1.'s logits).
void moe_router_naive(const void* h /*[T,C] dt*/, const void* w_router /*[E,C] dt*/, DType dt, int64_t T, int64_t E,
                      int64_t C, float* logits /*[T,E]*/, cudaStream_t s);

// act [T*K, I] dt (pair order); gate_up [E, 2I, C] dt.
void moe_pair_gate_up(const void* h /*[T,C]*/, const void* gate_up, const int32_t* expert /*[T,K]*/, DType dt,
                      int64_t T, int64_t K, int64_t I, int64_t C, void* act, cudaStream_t s);
void moe_pair_gate_up_naive(const void* h /*[T,C]*/, const void* gate_up, const int32_t* expert /*[T,K]*/, DType dt,
                            int64_t T, int64_t K, int64_t I, int64_t C, void* act, cudaStream_t s);

// y [T, C] f32; down [E, C, I] dt; act [T*K, I] dt (pair order); weight [T, K] f32.
void moe_pair_down_combine(const void* act, const void* down, const int32_t* expert /*[T,K]*/,
                           const float* weight /*[T,K]*/, DType dt, int64_t T, int64_t K, int64_t C, int64_t I,
                           float* y, bool accumulate, cudaStream_t s);
void moe_pair_down_combine_naive(const void* act, const void* down, const int32_t* expert /*[T,K]*/,
                                 const float* weight /*[T,K]*/, DType dt, int64_t T, int64_t K, int64_t C, int64_t I,
                                 float* y, bool accumulate, cudaStream_t s);

// 3'. (the same contract as moe_pair_down_combine, the same bits). Also T <= 65535. Needs
// moe_pair_down_staged_supported(K, I): k x I x 2 bytes x 2 (act + one row) <= 110,592 (shared
// memory); false: run moe_pair_down_combine.
bool moe_pair_down_staged_supported(int64_t K, int64_t I);
// 3b. (the contract of moe_pair_down_combine_staged, the same bits). Needs
// moe_pair_down_bulk_supported(K, I): moe_pair_down_staged_supported's shapes on a GPU of compute
// capability 9.0+ (asked of the current device, once per device).
bool moe_pair_down_bulk_supported(int64_t K, int64_t I);
void moe_pair_down_combine_bulk(const void* act, const void* down, const int32_t* expert /*[T,K]*/,
                                const float* weight /*[T,K]*/, DType dt, int64_t T, int64_t K, int64_t C, int64_t I,
                                float* y, bool accumulate, cudaStream_t s);
// 2'. (the contract of moe_pair_gate_up, the same bits). Also T x K <= 65535. Needs
// moe_pair_gate_up_staged_supported(C): 3 x C x 2 bytes <= 110,592 (C <= 18,432).
bool moe_pair_gate_up_staged_supported(int64_t C);
void moe_pair_gate_up_staged(const void* h /*[T,C]*/, const void* gate_up, const int32_t* expert /*[T,K]*/, DType dt,
                             int64_t T, int64_t K, int64_t I, int64_t C, void* act, cudaStream_t s);
// The staged form's launch for a shape (bench_cuda_moe prints it): columns per block, blocks,
// dynamic shared memory per block, and the blocks an SM holds (the occupancy API; 0 when
// unsupported). Sets the kernel's attributes on the current GPU (host calls, not for a capture).
struct MoeStagedShape {
  int rows = 0;
  int64_t blocks = 0, smem = 0;
  int blocks_per_sm = 0;
};
MoeStagedShape moe_pair_down_staged_shape(int64_t T, int64_t K, int64_t C, int64_t I, DType dt);
void moe_pair_down_combine_staged(const void* act, const void* down, const int32_t* expert /*[T,K]*/,
                                  const float* weight /*[T,K]*/, DType dt, int64_t T, int64_t K, int64_t C,
                                  int64_t I, float* y, bool accumulate, cudaStream_t s);

}  // namespace vlm::cuda
