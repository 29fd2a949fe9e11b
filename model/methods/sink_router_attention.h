// SinkRouterAttention: SinkRouter's part of AttentionLayer (paper §4, ALGORITHMS.md §8), for a
// batch that carries anchor stores (ForwardBatch::sink_anchors non-empty).
//  - Sequences whose chunk finishes prefill: their anchors for this layer are read back from the
//    cache (the first cached token's K/V, just written) — before any KV compression.
//  - Routed decode rows (a store, one token, not finishing prefill, this layer's anchor stored,
//    layer >= num_dense_layers): each kv group is scored against its anchor (eq. 11-12) and
//    compared with tau(context_len) (eq. 13); the group-skipping kernel runs them, with the
//    surrogate for sink groups. Counters go to the store and to ForwardBatch::sink_counters.
//    A store's probe (SinkAnchors::probe, calibration) sees each routed row before attention.
//  - Every other row runs the exact dense paged attention (a sub-batch when some rows are
//    routed; the whole batch, unchanged, when none is).
#pragma once

#include "kernels/attention/paged_kv.h"
#include "model/decoder/attention_layer.h"
#include "model/decoder/forward_batch.h"

namespace vlm {

class SinkRouterAttention {
 public:
  // Precondition: this step's K/V are already written to the cache; batch.sink_router is set
  // when batch.sink_anchors is non-empty (InternalError otherwise).
  // heads: a tensor-parallel rank's slice (KV heads split, not replicated: a group's heads on one
  // rank). The stores hold the model's KV heads ([L, total Hkv, D], sized for every layer before
  // the ranks run: CpuTensorParallelDecoder); a rank captures and reads its KV heads' rows, decides
  // its groups (each group's decision needs only its heads and anchor: the same as one rank) and
  // adds its groups to the counters under a lock.
  static void forward(int layer, const float* q /*[T,H,D]*/, int num_heads, const PagedKVLayer& kv,
                      const ForwardBatch& batch, float scale, float* out /*[T,H,D]*/, const HeadSlice& heads = {});
  // Only the anchor capture of forward() (sequences finishing prefill), for steps whose
  // attention runs another path (sparse prefill); their decode rows then run exact this step.
  static void capture_anchors(int layer, const PagedKVLayer& kv, const ForwardBatch& batch, const HeadSlice& heads = {});
};

}  // namespace vlm
