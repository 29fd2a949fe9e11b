// LOOK-M's importance-score passes on tensor cores (internal to cuda_look_m.cu; contract in
// cuda_look_m.h, look_m_accumulate_scores): the same two passes as the f32 kernels there
// (per key chunk of 128 the rows' max and sum of exp, then, given each row's merged (max, sum),
// every key's column sum), with the logits as bf16/f16 mma.sync GEMMs: the keys as the A operand
// (rows), the query rows of a kv group as B (columns). 16-bit products are exact; only the f32
// summation order differs from the f32 kernels (tests/kernels/cuda/test_cuda_look_m.cpp compares
// the two).
#pragma once

#include <vector_types.h>

#include <cstdint>

#include "kernels/attention/paged_kv.h"

typedef struct CUstream_st* cudaStream_t;

namespace vlm::cuda {

// True when the mma passes serve these queries and this cache: act == cache dtype, 16-bit, D in
// {64, 128}.
bool look_m_scores_mma_supported(DType act, DType cache, int head_dim);

// Pass 1 for rows [0, R) of q[R, H, D] at positions first_pos + r (keys j < first_pos + R, causal):
// parts[(chunk * R + r) * H + h] = (max, sum of exp) of row r, head h over the visible keys of
// chunk (128 keys each), as cuda_look_m.cu's chunk_stats_kernel.
void look_m_scores_mma_stats(const void* q, int32_t R, int num_heads, const PagedKVLayer& kv, const int32_t* table,
                             int32_t first_pos, float scale, float2* parts, cudaStream_t stream);
// Pass 2: scores[hk * stride + j] += Σ over rows r that see j and heads h of group hk of
// exp(scale q·k_j - stats.x) / stats.y, stats[r * H + h].
void look_m_scores_mma_columns(const void* q, int32_t R, int num_heads, const PagedKVLayer& kv, const int32_t* table,
                               int32_t first_pos, float scale, const float2* stats, float* scores, int64_t stride,
                               cudaStream_t stream);

}  // namespace vlm::cuda
