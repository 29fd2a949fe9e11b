// Driver of the group-skipping decode kernel: routes work items around sink groups, splits the
// active groups' keys, runs the per-key-tile math of the paged attention kernel (attn::TileOps,
// the best instruction set) and merges the split partials in f32.
#include "kernels/sink_router/group_skip_decode.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numbers>
#include <vector>

#include "kernels/attention/paged_attention_internal.h"
#include "kernels/attention/key_range.h"
#include "kernels/core/check.h"
#include "kernels/core/thread_pool.h"

namespace vlm {
namespace {

constexpr int KT = attn::kKeyTile;
constexpr int kMinSplitKeys = 256;   // a split covers at least this many keys (auto mode)
constexpr int kItemsPerThread = 4;   // auto mode splits until there is about this much work

struct Item {
  int seq, kvh;
  int k_begin, k_end;
  int64_t partial;  // offset of this item's (acc[G,Dp], m[G], l[G]) in the partials buffer
};

struct Group {  // one active (sequence, kv group): its items are consecutive partial slots
  int seq, kvh;
  int64_t first_partial;
  int num_parts;
};

struct Ctx {
  const attn::TileOps& ops;
  const float* q;
  const PagedKVLayer& kv;
  const DecodeBatch& batch;
  int H, G, D, Dp;
  float qscale;  // scale * log2(e)
  float* partials;
};

// Partial of one item: acc[G, Dp], m[G], l[G] (log2 domain).
void run_item(const Ctx& c, const Item& it) {
  const int32_t* table = c.batch.block_tables + static_cast<int64_t>(it.seq) * c.batch.max_blocks_per_seq;
  attn::KeyRangeState st =
      attn::begin_key_range(c.ops, c.q, c.H, c.D, c.Dp, c.batch.q_rows[it.seq], 1, it.kvh, c.G, c.qscale);
  attn::run_key_range(c.ops, c.kv, table, it.kvh, it.k_begin, it.k_end, c.G, -1, st);  // every key
  attn::store_partial(st, c.partials + it.partial);
}

void merge_group(const Ctx& c, const Group& gr, float* out) {
  const int64_t t = c.batch.q_rows[gr.seq];
  for (int g = 0; g < c.G; ++g)
    attn::merge_partials(c.partials + gr.first_partial, gr.num_parts, c.G, c.Dp, c.D, g,
                         out + (t * c.H + gr.kvh * c.G + g) * c.D);
}

void check_args(const float* q, int H, const PagedKVLayer& kv, const DecodeBatch& b,
                const uint8_t* skip, const float* out) {
  VLM_CHECK(kv.dtype == DType::F32 || kv.dtype == DType::BF16 || kv.dtype == DType::F16,
            "KV cache dtype {}", dtype_name(kv.dtype));
  VLM_CHECK(kv.num_kv_heads > 0 && kv.head_dim > 0 && kv.block_size > 0, "Hkv={} D={} B={}",
            kv.num_kv_heads, kv.head_dim, kv.block_size);
  VLM_CHECK(H > 0 && H % kv.num_kv_heads == 0, "H={} not a multiple of Hkv={}", H, kv.num_kv_heads);
  if (b.num_seqs == 0) return;
  VLM_CHECK(q && out && skip && b.q_rows && b.context_lens && b.block_tables, "null argument");
  for (int s = 0; s < b.num_seqs; ++s) {
    const int ctx = b.context_lens[s];
    VLM_CHECK(ctx >= 1 && b.q_rows[s] >= 0, "sequence {}: context_len {}, q row {}", s, ctx, b.q_rows[s]);
    bool active = false;
    for (int g = 0; g < kv.num_kv_heads; ++g) active |= skip[static_cast<int64_t>(s) * kv.num_kv_heads + g] == 0;
    if (!active) continue;
    const int64_t nb = (static_cast<int64_t>(ctx) + kv.block_size - 1) / kv.block_size;
    VLM_CHECK(nb <= b.max_blocks_per_seq, "sequence {}: {} tokens need {} blocks > {}", s, ctx, nb,
              b.max_blocks_per_seq);
    const int32_t* row = b.block_tables + static_cast<int64_t>(s) * b.max_blocks_per_seq;
    for (int64_t j = 0; j < nb; ++j)
      VLM_CHECK(row[j] >= 0 && row[j] < kv.num_blocks, "sequence {}: block_tables[{}] = {} outside [0, {})", s,
                j, row[j], kv.num_blocks);
  }
}

void write_surrogate(const float* surrogate, int s, int g, int H, int Hkv, int G, int D, int t, float* out) {
  for (int i = 0; i < G; ++i) {
    float* o = out + (static_cast<int64_t>(t) * H + g * G + i) * D;
    if (surrogate) {
      const float* v = surrogate + (static_cast<int64_t>(s) * Hkv + g) * D;
      std::copy(v, v + D, o);
    } else {
      std::fill(o, o + D, 0.0f);
    }
  }
}

}  // namespace

void group_skip_decode_attention(const float* q, int num_heads, const PagedKVLayer& kv, const DecodeBatch& batch,
                                 const uint8_t* skip, const float* surrogate, float scale, float* out,
                                 const GroupSkipOptions& opt) {
  check_args(q, num_heads, kv, batch, skip, out);
  const int Hkv = kv.num_kv_heads, G = num_heads / Hkv, D = kv.head_dim;
  const int Dp = attn::padded_head_dim(D);

  // Sink groups: the surrogate, and nothing of their cache is touched. Active groups: items.
  std::vector<Group> groups;
  int64_t total_keys = 0;
  for (int s = 0; s < batch.num_seqs; ++s)
    for (int g = 0; g < Hkv; ++g) {
      if (skip[static_cast<int64_t>(s) * Hkv + g]) {
        write_surrogate(surrogate, s, g, num_heads, Hkv, G, D, batch.q_rows[s], out);
      } else {
        groups.push_back({s, g, 0, 0});
        total_keys += batch.context_lens[s];
      }
    }
  if (groups.empty()) return;

  ThreadPool& pool = global_thread_pool();
  const double target =
      static_cast<double>(total_keys) / (kItemsPerThread * std::max(1, pool.num_threads()));
  const int64_t stride = static_cast<int64_t>(G) * (Dp + 2);
  std::vector<Item> items;
  int64_t partial_floats = 0;
  for (Group& gr : groups) {
    const int keys = batch.context_lens[gr.seq];
    int parts = opt.num_splits > 0
                    ? opt.num_splits
                    : static_cast<int>(std::min<double>(std::ceil(keys / target), keys / kMinSplitKeys));
    parts = std::clamp(parts, 1, (keys + KT - 1) / KT);
    const int chunk = ((keys + parts - 1) / parts + KT - 1) / KT * KT;  // whole key tiles
    gr.first_partial = partial_floats;
    for (int k = 0; k < keys; k += chunk, ++gr.num_parts) {
      items.push_back({gr.seq, gr.kvh, k, std::min(keys, k + chunk), partial_floats});
      partial_floats += stride;
    }
  }
  std::vector<float> partials(static_cast<size_t>(partial_floats));
  const Ctx c{attn::tile_ops_for(kv), q, kv, batch, num_heads, G, D, Dp,
              scale * std::numbers::log2e_v<float>, partials.data()};
  pool.run_tasks(static_cast<int64_t>(items.size()), [&](int64_t i) { run_item(c, items[i]); });
  pool.run_tasks(static_cast<int64_t>(groups.size()), [&](int64_t i) { merge_group(c, groups[i], out); });
}

void group_skip_decode_ref(const float* q, int num_heads, const PagedKVLayer& kv, const DecodeBatch& batch,
                           const uint8_t* skip, const float* surrogate, float scale, float* out) {
  check_args(q, num_heads, kv, batch, skip, out);
  const int H = num_heads, Hkv = kv.num_kv_heads, G = H / Hkv, D = kv.head_dim, B = kv.block_size;
  std::vector<double> k, v, p;
  for (int s = 0; s < batch.num_seqs; ++s) {
    const int S = batch.context_lens[s], t = batch.q_rows[s];
    const int32_t* table = batch.block_tables + static_cast<int64_t>(s) * batch.max_blocks_per_seq;
    for (int g = 0; g < Hkv; ++g) {
      if (skip[static_cast<int64_t>(s) * Hkv + g]) {
        write_surrogate(surrogate, s, g, H, Hkv, G, D, t, out);
        continue;
      }
      k.assign(static_cast<size_t>(S) * D, 0.0);  // this group's keys and values [S, D]
      v.assign(k.size(), 0.0);
      for (int j = 0; j < S; ++j)
        for (int d = 0; d < D; ++d) {
          const int64_t src = table[j / B] * kv.block_stride() + g * kv.head_stride() +
                              static_cast<int64_t>(j % B) * D + d;
          k[static_cast<size_t>(j) * D + d] = load_as_f32(kv.k, kv.dtype, src);
          v[static_cast<size_t>(j) * D + d] = load_as_f32(kv.v, kv.dtype, src);
        }
      p.resize(S);
      for (int i = 0; i < G; ++i) {
        const float* qh = q + (static_cast<int64_t>(t) * H + g * G + i) * D;
        double mx = -INFINITY;
        for (int j = 0; j < S; ++j) {
          double dot = 0.0;
          for (int d = 0; d < D; ++d) dot += static_cast<double>(qh[d]) * k[static_cast<size_t>(j) * D + d];
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0.0;
        for (int j = 0; j < S; ++j) sum += (p[j] = std::exp(p[j] - mx));
        float* o = out + (static_cast<int64_t>(t) * H + g * G + i) * D;
        for (int d = 0; d < D; ++d) {
          double acc = 0.0;
          for (int j = 0; j < S; ++j) acc += p[j] * v[static_cast<size_t>(j) * D + d];
          o[d] = static_cast<float>(acc / sum);
        }
      }
    }
  }
}

}  // namespace vlm
