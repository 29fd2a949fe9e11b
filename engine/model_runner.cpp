#include "engine/model_runner.h"

#include <algorithm>

#include "kernels/check.h"

namespace vlm {
namespace {

void fill_sparse_prefill(const SchedulerOutput& out, const SparsePrefillConfig& dflt, ForwardBatch& fb) {
  const size_t S = out.chunks.size();
  for (size_t s = 0; s < S; ++s) {
    const ScheduledChunk& c = out.chunks[s];
    const Sequence& seq = *c.seq;
    SparsePrefillConfig cfg = dflt;
    cfg.method = seq.params.sparse_prefill.value_or(dflt.method);
    if (!cfg.enabled() || c.num_tokens <= 1 || seq.num_prompt_tokens < cfg.min_prompt_len) continue;
    if (fb.sparse_prefill.empty()) {
      fb.sparse_prefill.assign(S, SparsePrefillConfig{});  // method Off
      fb.prompt_lens.assign(S, 0);
    }
    fb.sparse_prefill[s] = cfg;
    // the prompt's end in cache positions (cache and logical positions differ after compaction)
    fb.prompt_lens[s] = seq.num_prompt_tokens - (c.start - c.cache_start);
  }
}

}  // namespace

ModelRunner::ModelRunner(const LlmDecoder& decoder, KVCache& cache) : decoder_(decoder), cache_(cache) {}

ForwardBatch ModelRunner::make_batch(const SchedulerOutput& out, int block_size,
                                     const SparsePrefillConfig* sparse) {
  ForwardBatch fb;
  const size_t S = out.chunks.size();
  for (const ScheduledChunk& c : out.chunks)
    fb.max_blocks_per_seq = std::max(fb.max_blocks_per_seq, static_cast<int>(c.seq->block_table.size()));
  fb.token_ids.reserve(static_cast<size_t>(out.num_batched_tokens));
  fb.positions.reserve(fb.token_ids.capacity());
  fb.slot_mapping.reserve(fb.token_ids.capacity());
  fb.modalities.reserve(fb.token_ids.capacity());
  fb.cu_seqlens_q.push_back(0);
  fb.block_tables.assign(S * static_cast<size_t>(fb.max_blocks_per_seq), -1);
  for (size_t s = 0; s < S; ++s) {
    const ScheduledChunk& c = out.chunks[s];
    const Sequence& seq = *c.seq;
    const int32_t cache_end = c.cache_start + c.num_tokens;
    VLM_CHECK(c.num_tokens > 0 && c.start + c.num_tokens <= seq.num_tokens(),
              "sequence {}: chunk [{}, +{}) of {} tokens", seq.id, c.start, c.num_tokens, seq.num_tokens());
    VLM_CHECK(static_cast<int64_t>(seq.block_table.size()) * block_size >= cache_end,
              "sequence {}: {} blocks for {} cache slots", seq.id, seq.block_table.size(), cache_end);
    for (int32_t i = 0; i < c.num_tokens; ++i) {
      const int32_t pos = c.start + i, slot = c.cache_start + i;
      fb.token_ids.push_back(seq.token_ids[pos]);
      fb.positions.push_back(pos);
      fb.slot_mapping.push_back(seq.block_table[slot / block_size] * block_size + slot % block_size);
      fb.modalities.push_back(seq.modality(pos));
    }
    const int32_t first = fb.cu_seqlens_q.back();
    if (c.samples) fb.logits_indices.push_back(first + c.num_tokens - 1);
    fb.cu_seqlens_q.push_back(first + c.num_tokens);
    fb.context_lens.push_back(cache_end);
    fb.finishes_prefill.push_back(c.finishes_prefill ? 1 : 0);
    std::copy(seq.block_table.begin(), seq.block_table.end(),
              fb.block_tables.begin() + static_cast<int64_t>(s) * fb.max_blocks_per_seq);
  }
  if (sparse) fill_sparse_prefill(out, *sparse, fb);
  return fb;
}

void ModelRunner::run(const SchedulerOutput& out, std::vector<float>& logits) {
  for (const BlockCopy& c : out.block_copies) cache_.copy_block(c.src, c.dst);
  const ForwardBatch fb = make_batch(out, cache_.shape().block_size, &sparse_prefill_);
  decoder_.forward(fb, cache_.layers(), logits);
}

}  // namespace vlm
