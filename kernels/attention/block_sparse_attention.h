// Block-sparse flash-style prefill attention over the paged KV cache (the mechanism behind
// sparse prefill; the patterns in kernels/sparse_prefill/ only decide the plan).
//
// For every sequence s with plans[s] != nullptr, every query head h and every query block m of
// plans[s]->heads[h], the rows of that block attend the keys the plan lists for it (key blocks,
// possibly permuted, plus gathered columns), under the causal mask by original positions (see
// block_sparse_plan.h). Query head h reads kv head h / (H / Hkv) straight from the cache (no K/V
// copy). Queries may be the tail of a longer sequence (chunked prefill): the plan's num_keys is
// the sequence's context length. Work items are (sequence, head, query block), run on the
// global thread pool with the online-softmax tile kernels of paged_attention (TileOps): keys of
// each tile are taken in ascending position order, so the causal mask of a tile stays a prefix
// per row however rows and keys were permuted.
//
// block_sparse_attention_ref: the same mask, materialised per head (head_plan_mask), then plain
// two-pass softmax attention in double over the gathered K/V.
#pragma once

#include <span>

#include "kernels/attention/block_sparse_plan.h"
#include "kernels/attention/paged_attention.h"

namespace vlm {

// q[T, H, D] f32 post-RoPE; out[T, H, D]: only the rows of sequences with a plan are written.
// plans[num_seqs]: nullptr skips the sequence. Preconditions: paged_attention's; for a planned
// sequence plan.q_len == its q_len, plan.num_keys == context_lens[s], plan.heads.size() == H;
// the plan is well formed (validate_plan; checked in the reference, trusted by the kernel).
void block_sparse_attention(const float* q /*[T,H,D]*/, int num_heads, const PagedKVLayer& kv,
                            const AttentionBatch& batch,
                            std::span<const BlockSparsePlan* const> plans /*[num_seqs]*/,
                            float scale, float* out /*[T,H,D]*/);

void block_sparse_attention_ref(const float* q /*[T,H,D]*/, int num_heads,
                                const PagedKVLayer& kv, const AttentionBatch& batch,
                                std::span<const BlockSparsePlan* const> plans /*[num_seqs]*/,
                                float scale, float* out /*[T,H,D]*/);

}  // namespace vlm
