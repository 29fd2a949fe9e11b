// LOOK-M importance scores: column sums of prompt softmax attention, per KV head (eq. 4).
// GQA: the G = H / Hkv query heads of a group add into their KV head's scores.
//
// Rows are consecutive query tokens of one sequence: row r sits at cache position
// first_pos + r and attends keys [0, first_pos + r] (causal), read from the paged cache through
// block_table (the same layout paged_attention reads). Each row's softmax is over its whole
// causal range, so summing the contributions of successive prefill chunks gives exactly the
// column sums over all prompt queries ("full" scores); passing only the last W rows gives the
// "window" scores.
//
// accumulate_attention_scores: per KV head, K gathered to f32, Q·K^T by sgemm in row tiles,
// max-subtracted softmax in f32, column sums in f32. accumulate_attention_scores_ref: the dense
// attention matrix in double, then its column sums.
#pragma once

#include <cstdint>

#include "kernels/attention/paged_kv.h"

namespace vlm {

// q[R, H, D] post-RoPE query rows; scale multiplies q·k. Adds into scores[h * stride + j] for
// kv head h and key j < first_pos + R. Preconditions: H % Hkv == 0, stride >= first_pos + R,
// block_table covers ceil((first_pos + R) / B) blocks. R == 0 is a no-op.
void accumulate_attention_scores(const float* q /*[R,H,D]*/, int32_t R, int num_heads, const PagedKVLayer& kv,
                                 const int32_t* block_table, int32_t first_pos, float scale,
                                 float* scores /*[Hkv, stride]*/, int64_t stride);

void accumulate_attention_scores_ref(const float* q /*[R,H,D]*/, int32_t R, int num_heads, const PagedKVLayer& kv,
                                     const int32_t* block_table, int32_t first_pos, float scale,
                                     float* scores /*[Hkv, stride]*/, int64_t stride);

// Gathers kv head h of cache positions [0, n) to f32: k_out[n, D], v_out[n, D] (either may be
// null to skip it).
void gather_kv_head(const PagedKVLayer& kv, const int32_t* block_table, int32_t n, int h,
                    float* k_out /*[n,D]*/, float* v_out /*[n,D]*/);

}  // namespace vlm
