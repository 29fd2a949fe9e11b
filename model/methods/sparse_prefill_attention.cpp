#include "model/methods/sparse_prefill_attention.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <vector>

#include "kernels/attention/block_sparse_attention.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/core/check.h"
#include "kernels/sparse_prefill/sparse_prefill_planner.h"

namespace vlm {

void sparse_prefill_attention(int layer, const float* q, int H, const PagedKVLayer& kv,
                              const ForwardBatch& batch, float scale, float* out, int head_begin) {
  const int S = batch.num_seqs();
  VLM_CHECK(static_cast<int>(batch.sparse_prefill.size()) == S, "{} sparse-prefill entries for {} sequences",
            batch.sparse_prefill.size(), S);
  const int D = kv.head_dim;
  const AttentionBatch ab = batch.attention_batch();
  std::vector<std::optional<BlockSparsePlan>> plans(S);
  std::vector<const BlockSparsePlan*> plan_ptrs(S, nullptr);
  std::vector<uint8_t> codes;  // modality codes of the keys of the sequence being planned
  // Dense sub-batch: the rows of every sequence without a plan, packed.
  std::vector<int32_t> cu{0}, ctx, tables, rows_of;  // rows_of: dense sequence -> its batch seq
  for (int s = 0; s < S; ++s) {
    const int t0 = batch.cu_seqlens_q[s], q_len = batch.cu_seqlens_q[s + 1] - t0;
    if (batch.sparse_prefill[s].enabled() && q_len > 1) {
      ChunkView cv;
      cv.q = q + static_cast<int64_t>(t0) * H * D;
      cv.q_len = q_len;
      cv.num_keys = batch.context_lens[s];
      cv.prompt_len = batch.prompt_lens.empty() ? cv.num_keys : batch.prompt_lens[s];
      cv.block_table = ab.block_tables + static_cast<int64_t>(s) * ab.max_blocks_per_seq;
      cv.layer = layer;
      cv.head_begin = head_begin;
      if (s < static_cast<int>(batch.prompt_modalities.size()) && !batch.prompt_modalities[s].empty()) {
        const auto tags = batch.prompt_modalities[s];
        codes.assign(cv.num_keys, static_cast<uint8_t>(Modality::Text));
        for (int j = 0; j < std::min<int>(cv.num_keys, static_cast<int>(tags.size())); ++j)
          codes[j] = static_cast<uint8_t>(tags[j].modality);
        cv.modalities = codes.data();
      }
      if (s < static_cast<int>(batch.frame_strides.size())) cv.frame_strides = batch.frame_strides[s];
      plans[s] = build_sparse_plan(batch.sparse_prefill[s], cv, H, kv, scale);
      plan_ptrs[s] = &*plans[s];
      if (s < static_cast<int>(batch.sparse_block_counts.size()) && batch.sparse_block_counts[s]) {
        static std::mutex mu;  // tensor parallelism: every rank adds its heads' counts
        const BlockCounts add = plan_block_counts(*plans[s]);
        const std::lock_guard<std::mutex> lock(mu);
        *batch.sparse_block_counts[s] += add;
      }
    } else if (q_len > 0) {
      rows_of.push_back(s);
      cu.push_back(cu.back() + q_len);
      ctx.push_back(batch.context_lens[s]);
      tables.insert(tables.end(), ab.block_tables + static_cast<int64_t>(s) * ab.max_blocks_per_seq,
                    ab.block_tables + static_cast<int64_t>(s + 1) * ab.max_blocks_per_seq);
    }
  }
  if (!rows_of.empty()) {
    const int64_t row = static_cast<int64_t>(H) * D;
    std::vector<float> qd(static_cast<size_t>(cu.back()) * row), od(qd.size());
    for (size_t i = 0; i < rows_of.size(); ++i)
      std::copy_n(q + batch.cu_seqlens_q[rows_of[i]] * row, (cu[i + 1] - cu[i]) * row,
                  qd.data() + cu[i] * row);
    const AttentionBatch sub{static_cast<int>(rows_of.size()), cu.data(), ctx.data(), tables.data(),
                             ab.max_blocks_per_seq};
    paged_attention(qd.data(), H, kv, sub, scale, od.data());
    for (size_t i = 0; i < rows_of.size(); ++i)
      std::copy_n(od.data() + cu[i] * row, (cu[i + 1] - cu[i]) * row,
                  out + batch.cu_seqlens_q[rows_of[i]] * row);
  }
  block_sparse_attention(q, H, kv, ab, plan_ptrs, scale, out);
}

}  // namespace vlm
