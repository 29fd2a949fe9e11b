#include "model/methods/sink_router_attention.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "kernels/attention/paged_attention.h"
#include "kernels/core/check.h"
#include "kernels/sink_router/first_token_kv.h"
#include "kernels/sink_router/group_skip_decode.h"
#include "kernels/sink_router/sink_router_config.h"
#include "kernels/sink_router/sink_routing.h"
#include "model/methods/sink_anchors.h"

namespace vlm {
namespace {

// Dense paged attention over the sequences `seqs` of the batch only: their query rows are
// gathered into a contiguous sub-batch and the outputs scattered back.
void dense_subset(const std::vector<int>& seqs, const float* q, int H, const PagedKVLayer& kv,
                  const ForwardBatch& b, float scale, float* out) {
  if (seqs.empty()) return;
  const int64_t row = static_cast<int64_t>(H) * kv.head_dim;
  std::vector<int32_t> cu{0}, ctx, tables;
  tables.reserve(seqs.size() * static_cast<size_t>(b.max_blocks_per_seq));
  for (int s : seqs) {
    cu.push_back(cu.back() + b.cu_seqlens_q[s + 1] - b.cu_seqlens_q[s]);
    ctx.push_back(b.context_lens[s]);
    const auto* r = b.block_tables.data() + static_cast<size_t>(s) * b.max_blocks_per_seq;
    tables.insert(tables.end(), r, r + b.max_blocks_per_seq);
  }
  std::vector<float> qs(static_cast<size_t>(cu.back() * row)), os(qs.size());
  for (size_t i = 0; i < seqs.size(); ++i)
    std::copy(q + b.cu_seqlens_q[seqs[i]] * row, q + b.cu_seqlens_q[seqs[i] + 1] * row, qs.data() + cu[i] * row);
  const AttentionBatch ab{static_cast<int>(seqs.size()), cu.data(), ctx.data(), tables.data(), b.max_blocks_per_seq};
  paged_attention(qs.data(), H, kv, ab, scale, os.data());
  for (size_t i = 0; i < seqs.size(); ++i)
    std::copy(os.data() + cu[i] * row, os.data() + cu[i + 1] * row, out + b.cu_seqlens_q[seqs[i]] * row);
}

std::mutex& counters_mutex() {  // tensor parallelism: the ranks add their groups to shared counters
  static std::mutex mu;
  return mu;
}

int total_kv_heads(const PagedKVLayer& kv, const HeadSlice& h) { return h.total_kv_heads > 0 ? h.total_kv_heads : kv.num_kv_heads; }

}  // namespace

void SinkRouterAttention::capture_anchors(int layer, const PagedKVLayer& kv, const ForwardBatch& b, const HeadSlice& h) {
  const int S = b.num_seqs();
  VLM_CHECK(static_cast<int>(b.sink_anchors.size()) == S, "{} anchor stores for {} sequences",
            b.sink_anchors.size(), S);
  // Anchors: the first cached token of sequences finishing prefill (its K/V were written by
  // this or an earlier chunk; compression, if any, comes later in the layer).
  for (int s = 0; s < S; ++s) {
    SinkAnchors* a = b.sink_anchors[s];
    if (a == nullptr || !b.finishes_prefill[s]) continue;
    a->ensure_layer(layer, total_kv_heads(kv, h), kv.head_dim);  // under TP: sized before, a no-op
    const int64_t off = static_cast<int64_t>(h.kv_head_begin) * kv.head_dim;  // this rank's KV heads' rows
    load_first_token_kv(kv, b.block_tables[static_cast<size_t>(s) * b.max_blocks_per_seq], a->k_layer(layer) + off,
                        a->v_layer(layer) + off);
    if (h.kv_head_begin == 0) a->captured[static_cast<size_t>(layer)] = 1;  // one rank writes the flag
  }
}

void SinkRouterAttention::forward(int layer, const float* q, int num_heads, const PagedKVLayer& kv,
                                  const ForwardBatch& b, float scale, float* out, const HeadSlice& h) {
  const int S = b.num_seqs();
  VLM_CHECK(static_cast<int>(b.sink_anchors.size()) == S, "{} anchor stores for {} sequences",
            b.sink_anchors.size(), S);
  VLM_CHECK(b.sink_router != nullptr, "anchor stores without a SinkRouterConfig");
  const SinkRouterConfig& cfg = *b.sink_router;
  const int Hkv = kv.num_kv_heads, D = kv.head_dim;
  VLM_CHECK(h.total_heads == 0 || num_heads / Hkv == h.total_heads / total_kv_heads(kv, h),
            "SinkRouter over replicated KV heads ({} query heads of {} KV heads here, {} of {} in the model): a "
            "group's heads must be on one rank", num_heads, Hkv, h.total_heads, total_kv_heads(kv, h));

  capture_anchors(layer, kv, b, h);
  const int64_t off = static_cast<int64_t>(h.kv_head_begin) * D;  // this rank's KV heads in the stores

  std::vector<int> routed, dense;
  for (int s = 0; s < S; ++s) {
    const SinkAnchors* a = b.sink_anchors[s];
    const bool decode = b.cu_seqlens_q[s + 1] - b.cu_seqlens_q[s] == 1 && !b.finishes_prefill[s];
    const bool route = a != nullptr && decode && cfg.routes_layer(layer) && a->has(layer) &&
                       a->num_kv_heads == total_kv_heads(kv, h) && a->head_dim == D;
    (route ? routed : dense).push_back(s);
  }
  if (routed.empty()) {
    paged_attention(q, num_heads, kv, b.attention_batch(), scale, out);
    return;
  }

  // Route the decode rows: skip[R, Hkv], surrogate[R, Hkv, D] (anchor value) when asked.
  const int R = static_cast<int>(routed.size());
  std::vector<int32_t> q_rows(R), ctx(R), tables(static_cast<size_t>(R) * b.max_blocks_per_seq);
  std::vector<uint8_t> skip(static_cast<size_t>(R) * Hkv);
  std::vector<float> scores(Hkv), surrogate;
  const bool anchor_value = cfg.surrogate == SinkSurrogate::AnchorValue;
  if (anchor_value) surrogate.resize(static_cast<size_t>(R) * Hkv * D);
  int64_t skipped = 0, bytes = 0;
  for (int i = 0; i < R; ++i) {
    const int s = routed[i];
    SinkAnchors& a = *b.sink_anchors[s];
    q_rows[i] = b.cu_seqlens_q[s];
    ctx[i] = b.context_lens[s];
    std::copy_n(b.block_tables.data() + static_cast<size_t>(s) * b.max_blocks_per_seq, b.max_blocks_per_seq,
                tables.data() + static_cast<size_t>(i) * b.max_blocks_per_seq);
    sink_group_scores(q + static_cast<int64_t>(q_rows[i]) * num_heads * D, num_heads, a.k_layer(layer) + off, Hkv, D,
                      cfg.aggregation, scores.data());
    const int n = sink_route_groups(scores.data(), Hkv, cfg.threshold(ctx[i]), skip.data() + static_cast<size_t>(i) * Hkv);
    if (a.probe) {
      const int64_t qoff = static_cast<int64_t>(q_rows[i]) * num_heads * D;
      a.probe->on_routed_row({layer, q + qoff, num_heads, scores.data(), skip.data() + static_cast<size_t>(i) * Hkv,
                              cfg.threshold(ctx[i]), &kv, tables.data() + static_cast<size_t>(i) * b.max_blocks_per_seq,
                              ctx[i], scale});
    }
    if (anchor_value) std::copy_n(a.v_layer(layer) + off, Hkv * D, surrogate.data() + static_cast<size_t>(i) * Hkv * D);
    {
      const std::lock_guard<std::mutex> lock(counters_mutex());
      a.groups_routed += Hkv;
      a.groups_skipped += n;
    }
    skipped += n;
    bytes += static_cast<int64_t>(n) * ctx[i] * D * 2 * static_cast<int64_t>(dtype_size(kv.dtype));
  }
  if (b.sink_counters) {
    const std::lock_guard<std::mutex> lock(counters_mutex());
    b.sink_counters->groups_routed += static_cast<int64_t>(R) * Hkv;
    b.sink_counters->groups_skipped += skipped;
    b.sink_counters->kv_bytes_skipped += bytes;
  }
  const DecodeBatch db{R, q_rows.data(), ctx.data(), tables.data(), b.max_blocks_per_seq};
  group_skip_decode_attention(q, num_heads, kv, db, skip.data(), anchor_value ? surrogate.data() : nullptr, scale,
                              out);
  dense_subset(dense, q, num_heads, kv, b, scale, out);
}

}  // namespace vlm
