// Block-sparse prefill attention (the driver): one work item per (sequence, query head, query
// block); each walks its listed key blocks and gathered columns in key tiles of KT keys with the
// TileOps of paged_attention. Contiguous key runs (identity key order) use the instruction-set
// loader; permuted blocks and gathered columns use a gather loader here.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numbers>
#include <vector>

#include "kernels/attention/block_sparse_attention.h"
#include "kernels/attention/paged_attention_internal.h"
#include "kernels/core/check.h"
#include "kernels/core/thread_pool.h"

namespace vlm {
namespace {

using attn::kKeyTile;
using attn::kSumLanes;
using attn::TileOps;
constexpr int KT = kKeyTile;

struct Item {
  int seq, head, qblock;
  double cost;
};

struct Buffers {  // per-thread, grown on demand
  std::vector<float> qt, acc, s, kt, vbuf, m_run, l_run;
  std::vector<int> nvalid, qpos, keys;
};
thread_local Buffers tls_buf;

// Keys at positions pos[0..n) (any order) of kv head kvh into kt (transposed) and vbuf rows.
void load_kv_gather(const PagedKVLayer& kv, const int32_t* table, int kvh, const int* pos, int n,
                    int Dp, float* kt /*[Dp,KT]*/, float* vbuf /*[KT,Dp]*/,
                    const float** vrows /*[KT]*/) {
  const int D = kv.head_dim, B = kv.block_size;
  const size_t esize = dtype_size(kv.dtype);
  float krow[1024];
  VLM_CHECK(D <= 1024, "head dim {} too large", D);
  for (int j = 0; j < n; ++j) {
    const int64_t elem = table[pos[j] / B] * kv.block_stride() + kvh * kv.head_stride() +
                         static_cast<int64_t>(pos[j] % B) * D;
    convert_to_f32(static_cast<const uint8_t*>(kv.k) + elem * esize, kv.dtype, krow, D);
    for (int d = 0; d < D; ++d) kt[d * KT + j] = krow[d];
    convert_to_f32(static_cast<const uint8_t*>(kv.v) + elem * esize, kv.dtype, vbuf + j * Dp, D);
    vrows[j] = vbuf + j * Dp;
  }
  for (int d = D; d < Dp; ++d) std::fill(kt + d * KT, kt + d * KT + KT, 0.0f);
}

struct Ctx : attn::AttentionCall {
  std::span<const BlockSparsePlan* const> plans;
};

void run_item(const Ctx& c, const Item& it) {
  const BlockSparsePlan& p = *c.plans[it.seq];
  const HeadPlan& hp = p.heads[it.head];
  const int Dp = c.Dp, D = c.D, H = c.H;
  const int kvh = it.head / c.G;
  const int t0 = c.batch.cu_seqlens_q[it.seq];
  const int off = p.offset();
  const int32_t* table =
      c.batch.block_tables + static_cast<int64_t>(it.seq) * c.batch.max_blocks_per_seq;
  const int i0 = it.qblock * p.block_m;
  const int M = std::min(p.block_m, p.q_len - i0);

  Buffers& b = tls_buf;
  b.qt.resize(static_cast<size_t>(M) * Dp);
  b.acc.assign(static_cast<size_t>(M) * Dp, 0.0f);
  b.s.resize(static_cast<size_t>(M) * KT);
  b.kt.resize(static_cast<size_t>(Dp) * KT);
  if (b.vbuf.size() != static_cast<size_t>(KT) * Dp) b.vbuf.assign(static_cast<size_t>(KT) * Dp, 0.0f);
  b.m_run.assign(M, -INFINITY);
  b.l_run.assign(static_cast<size_t>(M) * kSumLanes, 0.0f);
  b.nvalid.resize(M);
  b.qpos.resize(M);
  const float* vrows[KT];

  int maxpos = -1;
  for (int i = 0; i < M; ++i) {
    const int r = hp.q_order.empty() ? i0 + i : hp.q_order[i0 + i];
    b.qpos[i] = off + r;
    maxpos = std::max(maxpos, off + r);
    const float* src = c.q + (static_cast<int64_t>(t0 + r) * H + it.head) * D;
    float* dst = b.qt.data() + static_cast<size_t>(i) * Dp;
    for (int d = 0; d < D; ++d) dst[d] = src[d] * c.qscale;
    std::fill(dst + D, dst + Dp, 0.0f);
  }

  auto step = [&](int n) {
    c.ops.scores(b.qt.data(), M, Dp, b.kt.data(), n, b.s.data(), nullptr);
    c.ops.softmax(b.s.data(), b.nvalid.data(), M, Dp, b.m_run.data(), b.l_run.data(),
                  b.acc.data());
    c.ops.pv(b.s.data(), b.nvalid.data(), M, Dp, vrows, b.acc.data(), nullptr);
  };
  // Contiguous keys [k0, k1): the causal mask of a tile is nvalid = keys <= qpos.
  auto run_range = [&](int k0, int k1) {
    k1 = std::min(k1, maxpos + 1);
    for (int t = k0; t < k1; t += KT) {
      const int n = std::min(KT, k1 - t);
      for (int i = 0; i < M; ++i) b.nvalid[i] = std::clamp(b.qpos[i] - t + 1, 0, n);
      c.ops.load_kv(c.kv, table, kvh, t, n, Dp, b.kt.data(), b.vbuf.data(), vrows);
      step(n);
    }
  };
  // Ascending key positions keys[0..n), all <= maxpos.
  auto run_list = [&](const int* keys, int n_all) {
    for (int t = 0; t < n_all; t += KT) {
      const int n = std::min(KT, n_all - t);
      const int* kp = keys + t;
      for (int i = 0; i < M; ++i)
        b.nvalid[i] = static_cast<int>(std::upper_bound(kp, kp + n, b.qpos[i]) - kp);
      load_kv_gather(c.kv, table, kvh, kp, n, Dp, b.kt.data(), b.vbuf.data(), vrows);
      step(n);
    }
  };

  for (int i = hp.block_ptr[it.qblock]; i < hp.block_ptr[it.qblock + 1]; ++i) {
    const int k0 = hp.blocks[i], k1 = std::min(p.num_keys, k0 + p.block_n);
    if (hp.k_order.empty()) {
      run_range(k0, k1);
    } else {
      b.keys.clear();
      for (int j = k0; j < k1; ++j)
        if (hp.k_order[j] <= maxpos) b.keys.push_back(hp.k_order[j]);
      std::sort(b.keys.begin(), b.keys.end());
      run_list(b.keys.data(), static_cast<int>(b.keys.size()));
    }
  }
  {
    const int* c0 = hp.cols.data() + hp.col_ptr[it.qblock];
    const int* c1 = hp.cols.data() + hp.col_ptr[it.qblock + 1];
    b.keys.assign(c0, std::upper_bound(c0, c1, maxpos));
    run_list(b.keys.data(), static_cast<int>(b.keys.size()));
  }

  for (int i = 0; i < M; ++i) {
    float l = 0.0f;
    for (int k = 0; k < kSumLanes; ++k) l += b.l_run[static_cast<size_t>(i) * kSumLanes + k];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const int r = b.qpos[i] - off;
    float* o = c.out + (static_cast<int64_t>(t0 + r) * H + it.head) * D;
    for (int d = 0; d < D; ++d) o[d] = b.acc[static_cast<size_t>(i) * Dp + d] * inv;
  }
}

void check_plans(int num_heads, const AttentionBatch& batch,
                 std::span<const BlockSparsePlan* const> plans) {
  VLM_CHECK(static_cast<int>(plans.size()) == batch.num_seqs, "{} plans for {} sequences",
            plans.size(), batch.num_seqs);
  for (int s = 0; s < batch.num_seqs; ++s) {
    const BlockSparsePlan* p = plans[s];
    if (!p) continue;
    const int q_len = batch.cu_seqlens_q[s + 1] - batch.cu_seqlens_q[s];
    VLM_CHECK(p->q_len == q_len && p->num_keys == batch.context_lens[s] &&
                  static_cast<int>(p->heads.size()) == num_heads,
              "sequence {}: plan for q_len {} keys {} heads {}, batch has {} {} {}", s, p->q_len,
              p->num_keys, p->heads.size(), q_len, batch.context_lens[s], num_heads);
  }
}

}  // namespace

void block_sparse_attention(const float* q, int num_heads, const PagedKVLayer& kv,
                            const AttentionBatch& batch,
                            std::span<const BlockSparsePlan* const> plans, float scale,
                            float* out) {
  attn::check_attention_args(q, num_heads, kv, batch, out);
  check_plans(num_heads, batch, plans);
  std::vector<Item> items;
  for (int s = 0; s < batch.num_seqs; ++s) {
    const BlockSparsePlan* p = plans[s];
    if (!p) continue;
    for (int h = 0; h < num_heads; ++h) {
      const HeadPlan& hp = p->heads[h];
      for (int m = 0; m < p->num_qblocks(); ++m) {
        const double work = (hp.block_ptr[m + 1] - hp.block_ptr[m]) +
                            (hp.col_ptr[m + 1] - hp.col_ptr[m]) / static_cast<double>(p->block_n);
        items.push_back({s, h, m, work + 0.25});
      }
    }
  }
  if (items.empty()) return;
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.cost > b.cost; });
  const Ctx c{{attn::tile_ops_best(), q, out, kv, batch, num_heads, num_heads / kv.num_kv_heads, kv.head_dim,
               attn::padded_head_dim(kv.head_dim), scale * std::numbers::log2e_v<float>},
              plans};
  global_thread_pool().run_tasks(static_cast<int64_t>(items.size()),
                                 [&](int64_t i) { run_item(c, items[i]); });
}

void block_sparse_attention_ref(const float* q, int num_heads, const PagedKVLayer& kv,
                                const AttentionBatch& batch,
                                std::span<const BlockSparsePlan* const> plans, float scale,
                                float* out) {
  attn::check_attention_args(q, num_heads, kv, batch, out);
  check_plans(num_heads, batch, plans);
  const int H = num_heads, Hkv = kv.num_kv_heads, G = H / Hkv, D = kv.head_dim,
            B = kv.block_size;
  std::vector<double> k, v, w;
  for (int s = 0; s < batch.num_seqs; ++s) {
    const BlockSparsePlan* p = plans[s];
    if (!p) continue;
    validate_plan(*p);
    const int t0 = batch.cu_seqlens_q[s], N = p->num_keys;
    const int32_t* table = batch.block_tables + static_cast<int64_t>(s) * batch.max_blocks_per_seq;
    k.assign(static_cast<size_t>(N) * Hkv * D, 0.0);
    v.assign(k.size(), 0.0);
    for (int j = 0; j < N; ++j)
      for (int h = 0; h < Hkv; ++h)
        for (int d = 0; d < D; ++d) {
          const int64_t src = table[j / B] * kv.block_stride() + h * kv.head_stride() +
                              static_cast<int64_t>(j % B) * D + d;
          k[(static_cast<size_t>(j) * Hkv + h) * D + d] = load_as_f32(kv.k, kv.dtype, src);
          v[(static_cast<size_t>(j) * Hkv + h) * D + d] = load_as_f32(kv.v, kv.dtype, src);
        }
    w.resize(N);
    for (int h = 0; h < H; ++h) {
      const auto mask = head_plan_mask(*p, h);
      const int hk = h / G;
      for (int r = 0; r < p->q_len; ++r) {
        const float* qv = q + (static_cast<int64_t>(t0 + r) * H + h) * D;
        const uint8_t* mrow = mask.data() + static_cast<size_t>(r) * N;
        double mx = -INFINITY;
        for (int j = 0; j < N; ++j) {
          if (!mrow[j]) continue;
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += qv[d] * k[(static_cast<size_t>(j) * Hkv + hk) * D + d];
          w[j] = dot * scale;
          mx = std::max(mx, w[j]);
        }
        double sum = 0;
        for (int j = 0; j < N; ++j)
          if (mrow[j]) sum += (w[j] = std::exp(w[j] - mx));
        float* o = out + (static_cast<int64_t>(t0 + r) * H + h) * D;
        for (int d = 0; d < D; ++d) {
          double acc = 0;
          for (int j = 0; j < N; ++j)
            if (mrow[j]) acc += w[j] * v[(static_cast<size_t>(j) * Hkv + hk) * D + d];
          o[d] = sum > 0 ? static_cast<float>(acc / sum) : 0.0f;
        }
      }
    }
  }
}

}  // namespace vlm
