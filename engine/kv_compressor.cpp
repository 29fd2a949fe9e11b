#include "engine/kv_compressor.h"

#include <algorithm>
#include <memory>

#include "kernels/core/check.h"

namespace vlm {

bool KVCompressor::applies(const Sequence& seq) {
  if (!seq.look_m.enabled) return false;
  if (seq.look_m.params.text_only_prompts) return true;
  return std::any_of(seq.prompt_modalities.begin(), seq.prompt_modalities.end(),
                     [](const ModalityTag& t) { return t.modality != Modality::Text; });
}

void KVCompressor::prepare(const SchedulerOutput& out) const {
  for (const ScheduledChunk& c : out.chunks) {
    Sequence& seq = *c.seq;
    if (!c.is_prefill || !applies(seq)) continue;
    VLM_CHECK(c.cache_start == c.start, "sequence {}: prefill chunk at position {} but cache slot {}", seq.id, c.start,
              c.cache_start);
    if (c.start == 0)
      seq.look_m_state = std::make_unique<LookMState>(seq.look_m.params, num_layers_, num_kv_heads_, seq.num_tokens(),
                                                      seq.prompt_modalities);
    VLM_CHECK(seq.look_m_state && seq.look_m_state->prefill_len == seq.num_tokens(),
              "sequence {}: LOOK-M prefill chunk at {} without its state", seq.id, c.start);
  }
}

int64_t KVCompressor::apply(const SchedulerOutput& out, BlockManager& blocks, EngineStats& stats) const {
  int64_t freed = 0;
  for (const ScheduledChunk& c : out.chunks) {
    Sequence& seq = *c.seq;
    if (!c.finishes_prefill || !seq.look_m_state) continue;
    const int32_t n = seq.look_m_state->compressed_len;
    VLM_CHECK(n >= 0 && n <= seq.num_cached_tokens, "sequence {}: compressed to {} of {} cached tokens", seq.id, n,
              seq.num_cached_tokens);
    const int64_t before_blocks = static_cast<int64_t>(seq.block_table.size());
    stats.look_m_kv_tokens_before += seq.num_cached_tokens;
    stats.look_m_kv_tokens_after += n;
    ++stats.num_look_m_compressions;
    seq.look_m_kv_tokens_before = seq.num_cached_tokens;
    if (n < seq.num_cached_tokens) blocks.trim(seq, n);
    seq.look_m_kv_tokens_after = n;
    freed += before_blocks - static_cast<int64_t>(seq.block_table.size());
    seq.look_m_state.reset();
  }
  stats.look_m_kv_blocks_freed += freed;
  return freed;
}

}  // namespace vlm
