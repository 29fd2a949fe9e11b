// Tiled online-softmax paged attention (the driver). The batch is cut into work items: one
// sequence, one kv head, a tile of query rows (x its G query heads) and a range of keys. Items
// run on the global thread pool; an item whose key range was split (split-K, for long contexts
// with few items, e.g. a single decode row) leaves a partial (m, l, acc) that a second pass
// merges. The per-key-tile math lives in TileOps (attention_tile_*.cpp), the loop over a key
// range and the merge in key_range.cpp.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <numbers>
#include <vector>

#include "kernels/attention/paged_attention.h"
#include "kernels/attention/paged_attention_internal.h"
#include "kernels/attention/key_range.h"
#include "kernels/core/check.h"
#include "kernels/core/thread_pool.h"

namespace vlm {
namespace attn {

void check_attention_args(const float* q, int num_heads, const PagedKVLayer& kv,
                          const AttentionBatch& batch, const float* out) {
  VLM_CHECK(kv.dtype == DType::F32 || kv.dtype == DType::BF16 || kv.dtype == DType::F16,
            "KV cache dtype {}", dtype_name(kv.dtype));
  VLM_CHECK(kv.num_kv_heads > 0 && kv.head_dim > 0 && kv.block_size > 0,
            "Hkv={} D={} B={}", kv.num_kv_heads, kv.head_dim, kv.block_size);
  VLM_CHECK(num_heads > 0 && num_heads % kv.num_kv_heads == 0, "H={} not a multiple of Hkv={}",
            num_heads, kv.num_kv_heads);
  VLM_CHECK(batch.num_seqs >= 0, "num_seqs {}", batch.num_seqs);
  if (batch.num_seqs == 0) return;
  VLM_CHECK(batch.cu_seqlens_q && batch.context_lens && batch.block_tables, "null batch array");
  VLM_CHECK(batch.cu_seqlens_q[0] == 0, "cu_seqlens_q[0] = {}", batch.cu_seqlens_q[0]);
  for (int s = 0; s < batch.num_seqs; ++s) {
    const int q_len = batch.cu_seqlens_q[s + 1] - batch.cu_seqlens_q[s];
    const int ctx = batch.context_lens[s];
    VLM_CHECK(q_len >= 0, "sequence {}: cu_seqlens_q decreases", s);
    VLM_CHECK(ctx >= q_len, "sequence {}: context_len {} < q_len {}", s, ctx, q_len);
    const int64_t nb = (static_cast<int64_t>(ctx) + kv.block_size - 1) / kv.block_size;
    VLM_CHECK(nb <= batch.max_blocks_per_seq, "sequence {}: {} tokens need {} blocks > {}", s,
              ctx, nb, batch.max_blocks_per_seq);
    const int32_t* row = batch.block_tables + static_cast<int64_t>(s) * batch.max_blocks_per_seq;
    for (int64_t j = 0; j < nb; ++j)
      VLM_CHECK(row[j] >= 0 && row[j] < kv.num_blocks, "sequence {}: block_tables[{}] = {} "
                "outside [0, {})", s, j, row[j], kv.num_blocks);
  }
  if (batch.cu_seqlens_q[batch.num_seqs] > 0) {
    VLM_CHECK(q && out, "null q or out");
    VLM_CHECK(kv.k && kv.v, "null KV cache");
  }
}

namespace {

constexpr int KT = kKeyTile;
constexpr int kMaxTileVectors = 64;   // query vectors (rows x G) per tile, when G allows
constexpr int kMinSplitKeys = 256;    // a split-K piece covers at least this many keys
constexpr int kItemsPerThread = 4;    // split long items until there is about this much work
constexpr int64_t kInlineMergeFloats = 16384;  // merges of up to this many partial floats run inline

struct WorkItem {
  int seq, kvh;
  int row0, rows;        // query rows [row0, row0 + rows) of the sequence
  int k_begin, k_end;    // keys [k_begin, k_end), already clipped to the causal limit
  int64_t partial = -1;  // slot for (acc, m, l), or -1: normalise straight into out
  double cost = 0;
};

struct MergeGroup {  // a query tile whose key range was split into parts
  int seq, kvh, row0, rows;
  int64_t first_partial;
  int num_parts;
};

struct Ctx : AttentionCall {
  float* partials;

  float* out_row(int64_t t, int kvh, int m) const {  // query vector m of a tile starting at row t
    return out + ((t + m / G) * H + kvh * G + m % G) * D;
  }
};

void run_item(const Ctx& c, const WorkItem& it) {
  const int q_len = c.batch.cu_seqlens_q[it.seq + 1] - c.batch.cu_seqlens_q[it.seq];
  const int64_t t0 = c.batch.cu_seqlens_q[it.seq] + it.row0;
  const int first_pos = c.batch.context_lens[it.seq] - q_len + it.row0;
  const int32_t* table =
      c.batch.block_tables + static_cast<int64_t>(it.seq) * c.batch.max_blocks_per_seq;
  KeyRangeState st = begin_key_range(c.ops, c.q, c.H, c.D, c.Dp, t0, it.rows, it.kvh, c.G, c.qscale);
  run_key_range(c.ops, c.kv, table, it.kvh, it.k_begin, it.k_end, c.G, first_pos, st);
  if (it.partial < 0) {
    for (int m = 0; m < st.M; ++m) store_normalized(st, m, c.D, c.out_row(t0, it.kvh, m));
  } else {
    store_partial(st, c.partials + it.partial);
  }
}

void merge_group(const Ctx& c, const MergeGroup& mg) {
  const int M = mg.rows * c.G;
  const int64_t t0 = c.batch.cu_seqlens_q[mg.seq] + mg.row0;
  for (int m = 0; m < M; ++m)
    merge_partials(c.partials + mg.first_partial, mg.num_parts, M, c.Dp, c.D, m,
                   c.out_row(t0, mg.kvh, m));
}

}  // namespace

void paged_attention_with(const TileOps& ops, const float* q /*[T,H,D]*/, int num_heads,
                          const PagedKVLayer& kv, const AttentionBatch& batch, float scale,
                          float* out /*[T,H,D]*/) {
  check_attention_args(q, num_heads, kv, batch, out);
  const int Hkv = kv.num_kv_heads;
  const int G = num_heads / Hkv;
  const int rows_per_tile = std::max(1, kMaxTileVectors / G);

  // Work items: (sequence, query tile, kv head), keys clipped to the tile's last row.
  std::vector<WorkItem> items;
  double total_cost = 0;
  for (int s = 0; s < batch.num_seqs; ++s) {
    const int q_len = batch.cu_seqlens_q[s + 1] - batch.cu_seqlens_q[s];
    if (q_len == 0) continue;
    const int num_tiles = (q_len + rows_per_tile - 1) / rows_per_tile;
    const int rows = (q_len + num_tiles - 1) / num_tiles;  // balanced tiles
    for (int row0 = 0; row0 < q_len; row0 += rows) {
      const int n = std::min(rows, q_len - row0);
      const int k_end = batch.context_lens[s] - q_len + row0 + n;
      for (int h = 0; h < Hkv; ++h) {
        WorkItem it{s, h, row0, n, 0, k_end};
        it.cost = static_cast<double>(n) * G * k_end + 1024.0;
        total_cost += it.cost;
        items.push_back(it);
      }
    }
  }
  if (items.empty()) return;

  // Split-K: cut items much larger than their share of the work into key ranges.
  ThreadPool& pool = global_thread_pool();
  const int Dp = padded_head_dim(kv.head_dim);
  std::vector<MergeGroup> groups;
  int64_t partial_floats = 0;
  if (pool.num_threads() > 1) {
    const double target = total_cost / (kItemsPerThread * pool.num_threads());
    const size_t num_base = items.size();
    for (size_t i = 0; i < num_base; ++i) {
      const WorkItem base = items[i];
      const int keys = base.k_end;
      const int parts = static_cast<int>(std::min<double>(std::ceil(base.cost / target),
                                                          keys / kMinSplitKeys));
      if (parts < 2) continue;
      const int chunk = ((keys + parts - 1) / parts + KT - 1) / KT * KT;
      const int64_t stride = static_cast<int64_t>(base.rows) * G * (Dp + 2);
      MergeGroup mg{base.seq, base.kvh, base.row0, base.rows, partial_floats, 0};
      for (int k = 0; k < keys; k += chunk, ++mg.num_parts) {
        WorkItem part = base;
        part.k_begin = k;
        part.k_end = std::min(keys, k + chunk);
        part.partial = partial_floats;
        part.cost = static_cast<double>(base.rows) * G * (part.k_end - k) + 1024.0;
        partial_floats += stride;
        if (k == 0) items[i] = part;
        else items.push_back(part);
      }
      groups.push_back(mg);
    }
  }
  // Largest first, so that the dynamic schedule ends evenly.
  std::stable_sort(items.begin(), items.end(),
                   [](const WorkItem& a, const WorkItem& b) { return a.cost > b.cost; });

  std::vector<float> partials(static_cast<size_t>(partial_floats));
  const Ctx c{{ops, q, out, kv, batch, num_heads, G, kv.head_dim, Dp, scale * std::numbers::log2e_v<float>},
              partials.data()};
  pool.run_tasks(static_cast<int64_t>(items.size()), [&](int64_t i) { run_item(c, items[i]); });
  // The merge reads num_parts partials per query vector: for a decode row (a few groups of G
  // vectors) that is a few microseconds, less than a pool hand-off; it runs here then.
  int64_t merge_floats = 0;
  for (const MergeGroup& mg : groups) merge_floats += static_cast<int64_t>(mg.rows) * G * mg.num_parts * Dp;
  if (merge_floats <= kInlineMergeFloats) {
    for (const MergeGroup& mg : groups) merge_group(c, mg);
  } else {
    pool.run_tasks(static_cast<int64_t>(groups.size()), [&](int64_t i) { merge_group(c, groups[i]); });
  }
}

}  // namespace attn

namespace {
std::atomic<bool> g_bf16_attention{false};
}  // namespace

void set_bf16_attention(bool enabled) { g_bf16_attention.store(enabled); }
bool bf16_attention() { return g_bf16_attention.load(std::memory_order_relaxed); }

void paged_attention(const float* q /*[T,H,D]*/, int num_heads, const PagedKVLayer& kv,
                     const AttentionBatch& batch, float scale, float* out /*[T,H,D]*/) {
  attn::paged_attention_with(attn::tile_ops_for(kv), q, num_heads, kv, batch, scale, out);
}

}  // namespace vlm
