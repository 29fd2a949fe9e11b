#include "model/methods/look_m_state.h"

#include <algorithm>

#include "kernels/core/check.h"
#include "kernels/kv_compression/attention_scores.h"
#include "kernels/kv_compression/kv_compaction.h"
#include "model/decoder/forward_batch.h"

namespace vlm {

LookMState::LookMState(const LookMParams& params_, int num_layers_, int num_kv_heads_, int32_t prefill_len_,
                       const std::vector<ModalityTag>& tags)
    : params(params_), num_layers(num_layers_), num_kv_heads(num_kv_heads_), prefill_len(prefill_len_) {
  validate(params);
  VLM_CHECK(prefill_len > 0 && num_layers > 0 && num_kv_heads > 0, "LOOK-M state L={} layers={} Hkv={}", prefill_len,
            num_layers, num_kv_heads);
  is_text.assign(prefill_len, 1);
  for (int32_t j = 0; j < prefill_len && j < static_cast<int32_t>(tags.size()); ++j)
    is_text[j] = tags[j].modality == Modality::Text ? 1 : 0;
}

void run_look_m(int layer, const float* q, int num_heads, const PagedKVLayer& kv, const ForwardBatch& batch,
                float scale, int kv_head_begin, int total_kv_heads) {
  if (batch.look_m.empty()) return;
  VLM_CHECK(static_cast<int>(batch.look_m.size()) == batch.num_seqs(), "{} LOOK-M states for {} sequences",
            batch.look_m.size(), batch.num_seqs());
  const int H = num_heads, D = kv.head_dim;
  for (int s = 0; s < batch.num_seqs(); ++s) {
    LookMState* st = batch.look_m[s];
    if (st == nullptr) continue;
    const int32_t t0 = batch.cu_seqlens_q[s], q_len = batch.cu_seqlens_q[s + 1] - t0;
    const int32_t S = batch.context_lens[s], first = S - q_len;
    const bool last = batch.finishes_prefill[s] != 0;
    VLM_CHECK(S <= st->prefill_len && (!last || S == st->prefill_len),
              "LOOK-M: chunk ends at {} of a {}-token prefill (finishes: {})", S, st->prefill_len, last);
    const int Hkv_all = total_kv_heads > 0 ? total_kv_heads : kv.num_kv_heads;
    VLM_CHECK(layer >= 0 && layer < st->num_layers && Hkv_all == st->num_kv_heads, "LOOK-M: layer {} of {}", layer,
              st->num_layers);
    const int32_t* table = batch.block_tables.data() + static_cast<int64_t>(s) * batch.max_blocks_per_seq;
    float* scores = st->layer_scores(layer) + static_cast<int64_t>(kv_head_begin) * st->prefill_len;  // this rank's heads
    if (st->params.scores == LookMScores::Full) {
      accumulate_attention_scores(q + static_cast<int64_t>(t0) * H * D, q_len, H, kv, table, first, scale, scores,
                                  st->prefill_len);
    } else if (last) {
      const int32_t R = std::min(st->params.window, q_len);
      accumulate_attention_scores(q + static_cast<int64_t>(t0 + q_len - R) * H * D, R, H, kv, table, S - R, scale,
                                  scores, st->prefill_len);
    }
    if (!last) continue;
    const int32_t n = compact_sequence_kv(kv, table, S, scores, st->prefill_len, st->is_text.data(), st->params);
    if (kv_head_begin != 0) continue;  // every head keeps the same count; KV head 0's rank records it
    VLM_CHECK(st->compressed_len < 0 || st->compressed_len == n, "LOOK-M: layer {} keeps {}, earlier layers {}", layer,
              n, st->compressed_len);
    st->compressed_len = n;
  }
}

}  // namespace vlm
