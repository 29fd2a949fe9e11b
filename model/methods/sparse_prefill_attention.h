// The sparse-prefill path of AttentionLayer: sequences whose ForwardBatch::sparse_prefill entry
// is enabled get a BlockSparsePlan per query head (kernels/sparse_prefill/) and run
// block_sparse_attention; the other sequences' rows (decode tokens, dense prefill) are gathered
// into a sub-batch for dense paged_attention, so their result is bit-identical to the exact path.
#pragma once

#include "kernels/attention/paged_kv.h"
#include "model/decoder/forward_batch.h"

namespace vlm {

// Preconditions: the step's K/V are already written; batch.sparse_prefill has num_seqs entries.
// q[T, H, D], out[T, H, D] as in AttentionLayer::forward.
// `layer` selects the per-head patterns of method MMInference; head_begin: the model's index of
// query head 0 here (tensor parallelism: a rank's heads; the patterns are the model's heads').
// Block counts are added to batch.sparse_block_counts under a lock (ranks on threads).
void sparse_prefill_attention(int layer, const float* q /*[T,H,D]*/, int num_heads, const PagedKVLayer& kv,
                              const ForwardBatch& batch, float scale, float* out /*[T,H,D]*/, int head_begin = 0);

}  // namespace vlm
