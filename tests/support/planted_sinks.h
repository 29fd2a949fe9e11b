// Structured SinkRouter inputs with planted sinks (tests only): one paged f32 layer holding the
// keys and values of one sequence of `ctx` tokens (random N(0, 1), shuffled blocks), whose first
// token is a sink: its value is near zero (0.01 N(0, 1)) and its key k0[g] a random direction of
// norm `anchor_norm` per kv group. Decode rows are queries whose heads in group g are
// alpha * unit(k0[g]) * sqrt(D) + N(0, 1) noise: alpha = 0 gives an unaligned query, a large
// alpha a query aligned with the anchor (high cosine, most attention mass on token 0).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/attention/paged_kv.h"

namespace vlm::testing {

struct PlantedCache {
  int Hkv = 0, D = 0, B = 0, ctx = 0;
  std::vector<float> kbuf, vbuf;  // [num_blocks, Hkv, B, D]
  PagedKVLayer kv;
  std::vector<int32_t> table;     // [ceil(ctx / B)] shuffled block ids
  std::vector<float> k0, v0;      // [Hkv, D] the first token's key and value

  PlantedCache(int Hkv_, int D_, int B_, int ctx_, uint32_t seed, float anchor_norm = 4.0f)
      : Hkv(Hkv_), D(D_), B(B_), ctx(ctx_) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    const int nb = (ctx + B - 1) / B;
    kv = PagedKVLayer{nullptr, nullptr, DType::F32, nb, B, Hkv, D};
    kbuf.assign(static_cast<size_t>(nb) * kv.block_stride(), 0.0f);
    vbuf.assign(kbuf.size(), 0.0f);
    kv.k = kbuf.data();
    kv.v = vbuf.data();
    table.resize(nb);
    for (int i = 0; i < nb; ++i) table[i] = i;
    std::shuffle(table.begin(), table.end(), rng);
    std::vector<float> k(static_cast<size_t>(ctx) * Hkv * D), v(k.size());
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    k0.resize(static_cast<size_t>(Hkv) * D);
    v0.resize(k0.size());
    for (int g = 0; g < Hkv; ++g) {
      double n = 0;
      for (int d = 0; d < D; ++d) n += static_cast<double>(k0[g * D + d] = nd(rng)) * k0[g * D + d];
      for (int d = 0; d < D; ++d) k0[g * D + d] *= anchor_norm / static_cast<float>(std::sqrt(n));
      for (int d = 0; d < D; ++d) v0[g * D + d] = 0.01f * nd(rng);
    }
    std::copy(k0.begin(), k0.end(), k.begin());  // token 0
    std::copy(v0.begin(), v0.end(), v.begin());
    std::vector<int32_t> slots(ctx);
    for (int j = 0; j < ctx; ++j) slots[j] = table[j / B] * B + j % B;
    write_kv(kv, k.data(), v.data(), slots.data(), ctx);
  }

  // A query row q[H, D] (H = G * Hkv) whose group g is aligned with strength alpha[g].
  std::vector<float> query(int G, const std::vector<float>& alpha, std::mt19937& rng) const {
    std::normal_distribution<float> nd;
    std::vector<float> q(static_cast<size_t>(G) * Hkv * D);
    for (int g = 0; g < Hkv; ++g) {
      double n = 0;
      for (int d = 0; d < D; ++d) n += static_cast<double>(k0[g * D + d]) * k0[g * D + d];
      const float unit = static_cast<float>(1.0 / std::sqrt(n)) * std::sqrt(static_cast<float>(D));
      for (int i = 0; i < G; ++i)
        for (int d = 0; d < D; ++d) q[(static_cast<size_t>(g) * G + i) * D + d] = alpha[g] * unit * k0[g * D + d] + nd(rng);
    }
    return q;
  }

  // Key j's value row of kv head g (f32 cache).
  const float* value(int j, int g) const {
    return vbuf.data() + table[j / B] * kv.block_stride() + g * kv.head_stride() + static_cast<int64_t>(j % B) * D;
  }
  const float* key(int j, int g) const {
    return kbuf.data() + table[j / B] * kv.block_stride() + g * kv.head_stride() + static_cast<int64_t>(j % B) * D;
  }
};

}  // namespace vlm::testing
