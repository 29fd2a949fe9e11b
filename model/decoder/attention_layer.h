// AttentionLayer: what one decoder layer's attention does with the paged KV cache, in one place,
// so the approximate methods (MMInference sparse prefill, LOOK-M compression at the end of
// prefill, SinkRouter decode) plug in here rather than into the decoder loop.
// Today: the exact path — write this step's K/V to their slots, then dense causal paged
// attention for every row (prefill chunks and decode tokens alike); when the batch carries
// sparse-prefill settings (ForwardBatch::sparse_prefill), those sequences' rows run the
// block-sparse kernel with a plan per head (model/methods/sparse_prefill_attention.h).
#pragma once

#include "kernels/attention/paged_kv.h"
#include "model/decoder/forward_batch.h"

namespace vlm {

// A rank's query and KV heads among the model's (tensor parallelism, issue 42): local head h is
// the model's head head_begin + h of total_heads; KV likewise. 0 totals: the rank holds them all.
struct HeadSlice {
  int head_begin = 0, total_heads = 0, kv_head_begin = 0, total_kv_heads = 0;
};

class AttentionLayer {
 public:
  AttentionLayer() = default;
  // heads: this rank's slice; sparse prefill's per-head patterns and SinkRouter's per-group
  // anchors are read and stored by the model's heads (the same choices as one rank).
  explicit AttentionLayer(const HeadSlice& heads) : heads_(heads) {}

  // q[T, H, D] post-RoPE; k, v [T, Hkv, D] post-RoPE (this step's tokens, written to the
  // cache first); out[T, H, D]. `layer` is the decoder layer index (methods keep per-layer state
  // and settings). scale multiplies q·k.
  void forward(int layer, const float* q /*[T,H,D]*/, const float* k /*[T,Hkv,D]*/,
               const float* v /*[T,Hkv,D]*/, int num_heads, const PagedKVLayer& kv,
               const ForwardBatch& batch, float scale, float* out /*[T,H,D]*/) const;

 private:
  HeadSlice heads_;
};

}  // namespace vlm
