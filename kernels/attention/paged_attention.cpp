// Tiled online-softmax paged attention (the driver). The batch is cut into work items: one
// sequence, one kv head, a tile of query rows (x its G query heads) and a range of keys. Items
// run on the global thread pool; an item whose key range was split (split-K, for long contexts
// with few items, e.g. a single decode row) leaves a partial (m, l, acc) that a second pass
// merges. The per-key-tile math lives in TileOps (attention_tile_*.cpp).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numbers>
#include <vector>

#include "kernels/attention/paged_attention.h"
#include "kernels/attention/paged_attention_internal.h"
#include "kernels/core/aligned_scratch.h"
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

// Per-thread tile buffers, 64-byte aligned; grown on demand, kept across calls.
struct Scratch : AlignedScratch {
  std::vector<int> nvalid;
};
thread_local Scratch tls_scratch;

inline size_t round16(size_t n) { return (n + 15) / 16 * 16; }

struct Ctx {
  const TileOps& ops;
  const float* q;
  float* out;
  const PagedKVLayer& kv;
  const AttentionBatch& batch;
  int H, G, D, Dp;
  float qscale;  // scale * log2(e): scores in the log2 domain
  float* partials;

  int64_t partial_stride(int M) const { return static_cast<int64_t>(M) * (Dp + 2); }
};

// Asks the caches for keys [k0, k0 + n) of kv head kvh (K and V), so that the next key tile
// streams in while this one is computed: blocks are scattered, which hardware prefetch misses.
void prefetch_keys(const PagedKVLayer& kv, const int32_t* table, int kvh, int k0, int n) {
  const int64_t esize = static_cast<int64_t>(dtype_size(kv.dtype));
  const int64_t row_bytes = kv.head_dim * esize;
  for (int j = k0; j < k0 + n;) {  // one run of consecutive slots of one block at a time
    const int run = std::min(k0 + n - j, kv.block_size - j % kv.block_size);
    const int64_t off = (table[j / kv.block_size] * kv.block_stride() + kvh * kv.head_stride() +
                         static_cast<int64_t>(j % kv.block_size) * kv.head_dim) * esize;
    for (int64_t b = 0; b < run * row_bytes; b += 64) {
      __builtin_prefetch(static_cast<const char*>(kv.k) + off + b);
      __builtin_prefetch(static_cast<const char*>(kv.v) + off + b);
    }
    j += run;
  }
}

void run_item(const Ctx& c, const WorkItem& it) {
  const int G = c.G, D = c.D, Dp = c.Dp, H = c.H;
  const int M = it.rows * G;
  const int q_len = c.batch.cu_seqlens_q[it.seq + 1] - c.batch.cu_seqlens_q[it.seq];
  const int t0 = c.batch.cu_seqlens_q[it.seq] + it.row0;
  const int first_pos = c.batch.context_lens[it.seq] - q_len + it.row0;
  const int32_t* table =
      c.batch.block_tables + static_cast<int64_t>(it.seq) * c.batch.max_blocks_per_seq;

  Scratch& sc = tls_scratch;
  const size_t nq = round16(static_cast<size_t>(M) * Dp), ns = round16(static_cast<size_t>(M) * KT);
  const size_t nkv = static_cast<size_t>(KT) * Dp, nm = round16(M);
  const size_t nl = static_cast<size_t>(M) * kSumLanes;
  float* qt = sc.get(2 * nq + ns + 2 * nkv + nm + nl);
  float* acc = qt + nq;
  float* s = acc + nq;
  float* kt = s + ns;
  float* vbuf = kt + nkv;
  float* m_run = vbuf + nkv;
  float* l_run = m_run + nm;
  sc.nvalid.resize(M);
  int* nvalid = sc.nvalid.data();

  std::fill(vbuf, vbuf + nkv, 0.0f);  // zero head-dim padding
  const float* vrows[KT];
  std::fill(acc, acc + static_cast<size_t>(M) * Dp, 0.0f);
  std::fill(m_run, m_run + M, -INFINITY);
  std::fill(l_run, l_run + nl, 0.0f);
  for (int r = 0; r < it.rows; ++r)
    for (int g = 0; g < G; ++g) {
      const float* src = c.q + (static_cast<int64_t>(t0 + r) * H + it.kvh * G + g) * D;
      float* dst = qt + static_cast<size_t>(r * G + g) * Dp;
      for (int d = 0; d < D; ++d) dst[d] = src[d] * c.qscale;
      std::fill(dst + D, dst + Dp, 0.0f);
    }

  for (int k0 = it.k_begin; k0 < it.k_end; k0 += KT) {
    const int n = std::min(KT, it.k_end - k0);
    for (int r = 0; r < it.rows; ++r) {  // causal mask: row r sees keys <= first_pos + r
      const int nv = std::clamp(first_pos + r - k0 + 1, 0, n);
      for (int g = 0; g < G; ++g) nvalid[r * G + g] = nv;
    }
    c.ops.load_kv(c.kv, table, it.kvh, k0, n, Dp, kt, vbuf, vrows);
    if (k0 + KT < it.k_end)
      prefetch_keys(c.kv, table, it.kvh, k0 + KT, std::min(KT, it.k_end - k0 - KT));
    c.ops.scores(qt, M, Dp, kt, n, s);
    c.ops.softmax(s, nvalid, M, Dp, m_run, l_run, acc);
    c.ops.pv(s, nvalid, M, Dp, vrows, acc);
  }
  auto row_sum = [&](int m) {  // total of row m's partial sums
    float sum = 0.0f;
    for (int i = 0; i < kSumLanes; ++i) sum += l_run[m * kSumLanes + i];
    return sum;
  };

  if (it.partial < 0) {
    for (int r = 0; r < it.rows; ++r)
      for (int g = 0; g < G; ++g) {
        const int m = r * G + g;
        const float inv = 1.0f / row_sum(m);
        float* o = c.out + (static_cast<int64_t>(t0 + r) * H + it.kvh * G + g) * D;
        for (int d = 0; d < D; ++d) o[d] = acc[static_cast<size_t>(m) * Dp + d] * inv;
      }
  } else {
    float* p = c.partials + it.partial;
    std::copy(acc, acc + static_cast<size_t>(M) * Dp, p);
    std::copy(m_run, m_run + M, p + static_cast<size_t>(M) * Dp);
    for (int m = 0; m < M; ++m) p[static_cast<size_t>(M) * (Dp + 1) + m] = row_sum(m);
  }
}

void merge_group(const Ctx& c, const MergeGroup& mg) {
  const int G = c.G, D = c.D, Dp = c.Dp, H = c.H;
  const int M = mg.rows * G;
  const int t0 = c.batch.cu_seqlens_q[mg.seq] + mg.row0;
  const int64_t stride = c.partial_stride(M);
  const float* base = c.partials + mg.first_partial;
  for (int m = 0; m < M; ++m) {
    float mt = -INFINITY;
    for (int p = 0; p < mg.num_parts; ++p)
      mt = std::max(mt, base[p * stride + static_cast<int64_t>(M) * Dp + m]);
    float l = 0.0f;
    float* o = c.out + (static_cast<int64_t>(t0 + m / G) * H + mg.kvh * G + m % G) * D;
    std::fill(o, o + D, 0.0f);
    for (int p = 0; p < mg.num_parts; ++p) {
      const float* part = base + p * stride;
      const float mp = part[static_cast<int64_t>(M) * Dp + m];
      if (mp == -INFINITY) continue;  // no valid key of this row in this part
      const float w = std::exp2(mp - mt);
      l += w * part[static_cast<int64_t>(M) * (Dp + 1) + m];
      for (int d = 0; d < D; ++d) o[d] += w * part[static_cast<int64_t>(m) * Dp + d];
    }
    const float inv = 1.0f / l;
    for (int d = 0; d < D; ++d) o[d] *= inv;
  }
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
  const Ctx c{ops, q, out, kv, batch, num_heads, G, kv.head_dim, Dp,
              scale * std::numbers::log2e_v<float>, partials.data()};
  pool.run_tasks(static_cast<int64_t>(items.size()), [&](int64_t i) { run_item(c, items[i]); });
  if (!groups.empty())
    pool.run_tasks(static_cast<int64_t>(groups.size()),
                   [&](int64_t i) { merge_group(c, groups[i]); });
}

}  // namespace attn

void paged_attention(const float* q /*[T,H,D]*/, int num_heads, const PagedKVLayer& kv,
                     const AttentionBatch& batch, float scale, float* out /*[T,H,D]*/) {
  attn::paged_attention_with(attn::tile_ops_best(), q, num_heads, kv, batch, scale, out);
}

}  // namespace vlm
