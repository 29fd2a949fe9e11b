#include "model/decoder/forward_batch.h"

#include <algorithm>

#include "kernels/core/check.h"

namespace vlm {

AttentionBatch ForwardBatch::attention_batch() const {
  AttentionBatch b;
  b.num_seqs = num_seqs();
  b.cu_seqlens_q = cu_seqlens_q.data();
  b.context_lens = context_lens.data();
  b.block_tables = block_tables.data();
  b.max_blocks_per_seq = max_blocks_per_seq;
  return b;
}

ForwardBatch make_forward_batch(std::span<const SequenceChunk> chunks, int block_size) {
  VLM_CHECK(block_size > 0, "block size {}", block_size);
  ForwardBatch fb;
  for (const auto& c : chunks)
    fb.max_blocks_per_seq = std::max(fb.max_blocks_per_seq, static_cast<int>(c.block_table.size()));
  fb.cu_seqlens_q.push_back(0);
  fb.block_tables.assign(chunks.size() * static_cast<size_t>(fb.max_blocks_per_seq), -1);
  for (size_t s = 0; s < chunks.size(); ++s) {
    const SequenceChunk& c = chunks[s];
    const auto n = static_cast<int32_t>(c.token_ids.size());
    VLM_CHECK(n > 0, "sequence {} has an empty chunk", s);
    VLM_CHECK(c.modalities.empty() || static_cast<int32_t>(c.modalities.size()) == n,
              "sequence {}: {} modality tags for {} tokens", s, c.modalities.size(), n);
    const int32_t end = c.start_pos + n;
    const int64_t needed = (end + block_size - 1) / block_size;
    VLM_CHECK(static_cast<int64_t>(c.block_table.size()) >= needed,
              "sequence {}: {} tokens need {} blocks, table has {}", s, end, needed, c.block_table.size());
    for (int32_t i = 0; i < n; ++i) {
      const int32_t pos = c.start_pos + i;
      fb.token_ids.push_back(c.token_ids[i]);
      fb.positions.push_back(pos);
      fb.slot_mapping.push_back(c.block_table[pos / block_size] * block_size + pos % block_size);
      fb.modalities.push_back(c.modalities.empty() ? ModalityTag{} : c.modalities[i]);
    }
    const int32_t first = fb.cu_seqlens_q.back();
    if (c.logits == LogitsFor::All)
      for (int32_t i = 0; i < n; ++i) fb.logits_indices.push_back(first + i);
    else if (c.logits == LogitsFor::Last)
      fb.logits_indices.push_back(first + n - 1);
    fb.cu_seqlens_q.push_back(first + n);
    fb.context_lens.push_back(end);
    fb.finishes_prefill.push_back(c.finishes_prefill ? 1 : 0);
    std::copy(c.block_table.begin(), c.block_table.end(),
              fb.block_tables.begin() + static_cast<int64_t>(s) * fb.max_blocks_per_seq);
  }
  return fb;
}

}  // namespace vlm
