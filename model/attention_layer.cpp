#include "model/attention_layer.h"

#include "kernels/attention/paged_attention.h"
#include "model/sparse_prefill_attention.h"

namespace vlm {

void AttentionLayer::forward(int layer, const float* q, const float* k, const float* v, int num_heads,
                             const PagedKVLayer& kv, const ForwardBatch& batch, float scale, float* out) const {
  (void)layer;
  write_kv(kv, k, v, batch.slot_mapping.data(), batch.num_tokens());
  if (!batch.sparse_prefill.empty()) {  // some sequence's prefill rows run block-sparse
    sparse_prefill_attention(q, num_heads, kv, batch, scale, out);
    return;
  }
  paged_attention(q, num_heads, kv, batch.attention_batch(), scale, out);
}

}  // namespace vlm
