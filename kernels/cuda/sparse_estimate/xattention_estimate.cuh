// Device half of CudaXAttentionPlan (cuda_xattention_plan.h): XAttention's estimation
// (kernels/sparse_prefill/xattention.h, ALGORITHMS.md §5 and §6.3) for the query heads of one
// sequence's chunk, on the GPU. Plain C++17 (included by the .cu and by cuda_xattention_plan.cpp).
//
// Scores: reshaped query row a (chunk rows a*S + S-1-s, s < S) against reshaped key b (keys
// b*S + s) over S*D, as an mma.sync GEMM reading Q and the paged cache directly (a segment s of
// the S*D width is one D-wide row of each side), scaled by scale / S, causal in reshaped
// coordinates, softmax per reshaped row in f32 (two passes: row max and sum, then the
// probabilities), summed per (query block, key block) in shared memory in a fixed order (no
// atomics: deterministic). Selection: per (head, query block) one CTA; the sink and diagonal
// blocks first, then the others in decreasing mass until the cumulative threshold, found by a
// radix select over the scores' float bits with 64-bit fixed-point mass sums (2^-52 units,
// order-independent and exact) instead of a sort; ties to the lower block. Output: a bitmap of
// the kept key blocks per (head, query block) and their counts.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/attention/cuda_attention.h"

namespace vlm::cuda {

constexpr int kXAttnBlock = 64;       // B: the GPU's plan block (query and key)
constexpr int kXAttnMaxHeads = 128;   // query heads one call estimates

struct XAttnShape {
  int num_heads = 0;  // H: query heads of q (kv head h / (H / Hkv))
  int t0 = 0;         // the chunk's first row in q
  int q_len = 0;      // rows: positions [num_keys - q_len, num_keys)
  int num_keys = 0;   // N
  int stride = 8;     // S (64 % S == 0)
  constexpr int num_qblocks() const { return (q_len + kXAttnBlock - 1) / kXAttnBlock; }
  constexpr int num_kblocks() const { return (num_keys + kXAttnBlock - 1) / kXAttnBlock; }
  constexpr int words() const { return (num_kblocks() + 31) / 32; }  // bitmap words per query block
};

// The heads one call works on (query head indices into q, at most kXAttnMaxHeads).
struct XAttnHeads {
  int n = 0;
  int32_t h[kXAttnMaxHeads];
};

// blk[heads.n, nqb, nkb] (f32, device; zeroed here) = xattention_block_scores of each listed head.
// q[T, H, D] in dtype act; block_table: the sequence's row (device); kv bf16/f16 (an F8_E4M3 cache throws
// InternalError: not read yet; --kv-cache-dtype fp8 refuses XAttention heads at start), D 64 or 128.
void xattn_block_scores(const void* q /*[T,H,D]*/, DType act, const PagedKVLayer& kv, const int32_t* block_table,
                        const XAttnShape& shape, const XAttnHeads& heads, float scale, float* blk /*[n,nqb,nkb]*/,
                        cudaStream_t stream);

// xattention_select over blk (as xattn_block_scores wrote it) for each listed head h = heads.h[i]:
// keep[h, nqb, words] (bit J of query block I: key block J kept) and nblocks[h * nqb + I] (the kept
// count). threshold >= 1, or a query block holding a position >= dense_from: every causal block.
void xattn_select(const float* blk /*[n,nqb,nkb]*/, const XAttnShape& shape, const XAttnHeads& heads,
                  float threshold, int dense_from, uint32_t* keep /*[H,nqb,words]*/, int32_t* nblocks /*[H*nqb]*/,
                  cudaStream_t stream);

// blocks[block_off[x] ..] = the starts J * 64 of the kept key blocks of item x = h * nqb + I,
// ascending (x < n = H * nqb), and the pointers of each head h as the schedule's descs read them
// (grid_plan.cuh): at ptrs + h * 2 (nqb + 1), block_ptr[I] = block_off[h * nqb + I] (absolute;
// block_ptr[nqb]: the head's end) then col_ptr [nqb + 1] all zero (no gathered columns).
void xattn_fill(const uint32_t* keep /*[n,words]*/, const int32_t* block_off /*[n]*/, int n, int nqb, int words,
                int32_t* blocks, int32_t* ptrs /*[H,2,nqb+1]*/, cudaStream_t stream);

}  // namespace vlm::cuda
