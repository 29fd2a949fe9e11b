// The synthetic long-context cache of bench_long_context_decode (header-only: every bench/*.cpp
// is its own executable): sequences with shuffled block tables, K/V filled with seeded uniform
// values and a near-zero sink value, LOOK-M compaction with the real kernels, one-token decode
// batches whose logical position runs ahead of a compacted cache.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "engine/scheduling/kv_cache.h"
#include "kernels/attention/paged_kv.h"
#include "kernels/kv_compression/attention_scores.h"
#include "kernels/kv_compression/kv_compaction.h"
#include "kernels/kv_compression/look_m_params.h"
#include "model/decoder/forward_batch.h"

namespace vlm::bench {

// xorshift64*: uniform floats in [-1, 1), fast enough to fill 1.5 GiB of cache in seconds.
struct FastRng {
  uint64_t s;
  explicit FastRng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  float next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return static_cast<float>(static_cast<int32_t>((s * 0x2545F4914F6CDD1Dull) >> 32)) * (1.0f / 2147483648.0f);
  }
};

// One sequence of the benchmark: its block table and cache lengths.
struct Seq {
  std::vector<int32_t> table;  // block ids; covers the cached tokens plus the decode token's slot
  int32_t cache_len = 0;       // tokens in the cache before the decode token
  int32_t position = 0;        // RoPE position of the decode token (logical length)
};

// Writes synthetic K/V for cache positions [0, n) of `seq` in every layer (seeded per layer, so
// two sequences filled with the same seed hold the same values).
inline void fill_kv(const KVCache& cache, const Seq& seq, int32_t n, uint64_t seed) {
  const int Hkv = cache.shape().num_kv_heads, D = cache.shape().head_dim, B = cache.shape().block_size;
  constexpr int32_t kChunk = 2048;
  std::vector<float> k(static_cast<size_t>(kChunk) * Hkv * D), v(k.size());
  std::vector<int32_t> slots(kChunk);
  for (size_t l = 0; l < cache.layers().size(); ++l) {
    FastRng rng(seed * 1000 + l);
    for (int32_t t0 = 0; t0 < n; t0 += kChunk) {
      const int32_t m = std::min(kChunk, n - t0);
      for (int32_t i = 0; i < m; ++i) slots[i] = seq.table[(t0 + i) / B] * B + (t0 + i) % B;
      for (size_t i = 0; i < static_cast<size_t>(m) * Hkv * D; ++i) {
        k[i] = rng.next();
        v[i] = rng.next();
      }
      if (t0 == 0)  // the sink token: a near-zero value
        for (int i = 0; i < Hkv * D; ++i) v[i] *= 0.01f;
      write_kv(cache.layers()[l], k.data(), v.data(), slots.data(), m);
    }
  }
}

// LOOK-M at the end of prefill, with the real kernels: window scores from W synthetic query rows,
// then selection + merge + compaction per layer. Returns the compacted length.
inline int32_t compress_look_m(const KVCache& cache, const Seq& seq, int32_t L, int H, const LookMParams& p) {
  const int Hkv = cache.shape().num_kv_heads, D = cache.shape().head_dim;
  std::vector<uint8_t> is_text(L, 0);  // 16 text tokens, image tokens, a 64-token question
  for (int32_t j = 0; j < std::min(16, L); ++j) is_text[j] = 1;
  for (int32_t j = std::max(0, L - 64); j < L; ++j) is_text[j] = 1;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  const int32_t W = std::min(p.window, L);
  std::vector<float> qw(static_cast<size_t>(W) * H * D), scores(static_cast<size_t>(Hkv) * L);
  int32_t kept = L;
  for (const PagedKVLayer& kv : cache.layers()) {
    for (float& x : qw) x = nd(rng);
    std::fill(scores.begin(), scores.end(), 0.0f);
    accumulate_attention_scores(qw.data(), W, H, kv, seq.table.data(), L - W, 1.0f / std::sqrt(float(D)),
                                scores.data(), L);
    kept = compact_sequence_kv(kv, seq.table.data(), L, scores.data(), L, is_text.data(), p);
  }
  return kept;
}

// A one-token decode batch for `seq`: token at position seq.position, written to slot cache_len.
inline ForwardBatch decode_batch(const Seq& seq, int B, int32_t token) {
  const int32_t ids[1] = {token};
  SequenceChunk c;
  c.token_ids = ids;
  c.start_pos = seq.cache_len;
  c.block_table = seq.table;
  c.logits = LogitsFor::Last;
  ForwardBatch fb = make_forward_batch(std::span<const SequenceChunk>(&c, 1), B);
  fb.positions[0] = seq.position;  // LOOK-M: the logical position runs ahead of the cache
  return fb;
}

}  // namespace vlm::bench
