// Builds the BlockSparsePlan of one sequence's prefill chunk from a SparsePrefillConfig: the
// policy side of sparse prefill (block_sparse_attention is the mechanism). Estimating patterns
// (vertical-slash) read the chunk's queries and the sequence's cached keys (post-RoPE).
#pragma once

#include <cstdint>
#include <span>

#include "kernels/attention/block_sparse_plan.h"
#include "kernels/attention/paged_kv.h"
#include "kernels/sparse_prefill/sparse_prefill_config.h"

namespace vlm {

struct ChunkView {
  const float* q = nullptr;         // [q_len, H, D] the chunk's query rows (post-RoPE)
  int q_len = 0;
  int num_keys = 0;                 // cached keys, the chunk's included
  int prompt_len = 0;               // the whole prompt (>= num_keys); the tri-shape dense tail
  const int32_t* block_table = nullptr;  // the sequence's block table row
  int layer = 0;                    // decoder layer (per-head patterns of method MMInference)
  // Modality code (Modality as uint8_t: 0 text, 1 image, 2 video) of every key position
  // [0, num_keys), or null: all text. The boundary heads permute by it.
  const uint8_t* modalities = nullptr;
  // Tokens per frame of the prompt's videos (known grid strides; the search space includes
  // them), or empty.
  std::span<const int32_t> frame_strides;
  // The model's index of query head 0 here (tensor parallelism: a rank's slice of the heads; the
  // per-head patterns are the model's heads').
  int head_begin = 0;
};

// One head's plan for a HeadPattern. keys[num_keys, D]: the head's kv-head keys (f32).
HeadPlan build_head_plan(const HeadPattern& pat, const ChunkView& chunk, int num_heads, int head,
                         const float* keys /*[N,D]*/, int D, float scale, int block, int last_q);

// Precondition: cfg.enabled(); H % kv.num_kv_heads == 0. The plan has H heads, block_m =
// block_n = cfg.block.
BlockSparsePlan build_sparse_plan(const SparsePrefillConfig& cfg, const ChunkView& chunk,
                                  int num_heads, const PagedKVLayer& kv, float scale);

// Keys [0, n) of kv head kvh of a sequence, gathered to f32 rows: keys[n, D].
void gather_head_keys(const PagedKVLayer& kv, const int32_t* block_table, int kvh, int n,
                      float* keys /*[n,D]*/);

}  // namespace vlm
