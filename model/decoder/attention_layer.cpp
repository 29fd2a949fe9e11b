#include "model/decoder/attention_layer.h"

#include "kernels/attention/paged_attention.h"
#include "kernels/core/check.h"
#include "model/methods/look_m_state.h"
#include "model/methods/sink_router_attention.h"
#include "model/methods/sparse_prefill_attention.h"

namespace vlm {

void AttentionLayer::forward(int layer, const float* q, const float* k, const float* v, int num_heads,
                             const PagedKVLayer& kv, const ForwardBatch& batch, float scale, float* out) const {
  write_kv(kv, k, v, batch.slot_mapping.data(), batch.num_tokens());
  if (batch.attention_probe) batch.attention_probe(layer, q, num_heads, kv, scale);
  if (!batch.sparse_prefill.empty()) {  // some sequence's prefill rows run block-sparse
    if (!batch.sink_anchors.empty()) SinkRouterAttention::capture_anchors(layer, kv, batch, heads_);
    sparse_prefill_attention(layer, q, num_heads, kv, batch, scale, out, heads_.head_begin);
  } else if (!batch.sink_anchors.empty()) {  // SinkRouter: anchors at the end of prefill, routed decode
    SinkRouterAttention::forward(layer, q, num_heads, kv, batch, scale, out, heads_);
  } else {
    paged_attention(q, num_heads, kv, batch.attention_batch(), scale, out);
  }
  if (!batch.look_m.empty() && heads_.total_heads > 0)
    VLM_CHECK(num_heads / kv.num_kv_heads == heads_.total_heads / heads_.total_kv_heads,
              "LOOK-M over replicated KV heads ({} query heads of {} KV heads here, {} of {} in the model): a group's "
              "heads must be on one rank", num_heads, kv.num_kv_heads, heads_.total_heads, heads_.total_kv_heads);
  run_look_m(layer, q, num_heads, kv, batch, scale, heads_.kv_head_begin, heads_.total_kv_heads);  // after attention: prefill output stays exact
}

}  // namespace vlm
