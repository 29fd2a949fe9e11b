// Test helper for the block-sparse attention and sparse-prefill tests: a paged KV cache holding
// a batch of sequences in shuffled blocks, with random (or caller-shaped) q, k, v.
#pragma once

#include <algorithm>
#include <functional>
#include <random>
#include <vector>

#include "kernels/attention/paged_attention.h"
#include "kernels/core/dtype.h"

namespace vlm::testing_sparse {

struct SeqShape {
  int q_len;  // query rows this step (the tail of the sequence)
  int ctx;    // keys in the cache, these rows included
};

struct SparseCache {
  std::vector<uint8_t> kbuf, vbuf;
  PagedKVLayer kv;
  std::vector<int32_t> cu{0}, ctx, tables;
  std::vector<float> q;  // [T, H, D]
  AttentionBatch batch;
  int H = 0, T = 0;

  // shape(seq, pos, head, d, is_key) may return an extra term added to each random k (is_key)
  // or q (!is_key) element, to plant structure; positions are within the sequence.
  using Shaper = std::function<float(int, int, int, int, bool)>;

  SparseCache(const std::vector<SeqShape>& seqs, int num_heads, int Hkv, int D, int B,
              DType dtype, uint32_t seed, const Shaper& shape = nullptr)
      : H(num_heads) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    int max_blocks = 1, total = 2;
    for (const auto& s : seqs) {
      max_blocks = std::max(max_blocks, (s.ctx + B - 1) / B);
      total += (s.ctx + B - 1) / B;
    }
    kv = PagedKVLayer{nullptr, nullptr, dtype, total, B, Hkv, D};
    const size_t bytes = static_cast<size_t>(total) * kv.block_stride() * dtype_size(dtype);
    kbuf.assign(bytes, 0);
    vbuf.assign(bytes, 0);
    kv.k = kbuf.data();
    kv.v = vbuf.data();
    std::vector<int32_t> perm(total);
    for (int i = 0; i < total; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    tables.assign(seqs.size() * max_blocks, -1);
    int next = 0;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const int n = seqs[s].ctx;
      for (int j = 0; j < (n + B - 1) / B; ++j) tables[s * max_blocks + j] = perm[next++];
      std::vector<int32_t> slots(n);
      std::vector<float> k(static_cast<size_t>(n) * Hkv * D), v(k.size());
      for (int j = 0; j < n; ++j) {
        slots[j] = tables[s * max_blocks + j / B] * B + j % B;
        for (int h = 0; h < Hkv; ++h)
          for (int d = 0; d < D; ++d) {
            const size_t i = (static_cast<size_t>(j) * Hkv + h) * D + d;
            k[i] = uni(rng) + (shape ? shape(static_cast<int>(s), j, h, d, true) : 0.0f);
            v[i] = uni(rng);
          }
      }
      write_kv(kv, k.data(), v.data(), slots.data(), n);
      for (int r = 0; r < seqs[s].q_len; ++r)
        for (int h = 0; h < H; ++h)
          for (int d = 0; d < D; ++d)
            q.push_back(uni(rng) +
                        (shape ? shape(static_cast<int>(s), n - seqs[s].q_len + r, h, d, false) : 0.0f));
      cu.push_back(cu.back() + seqs[s].q_len);
      ctx.push_back(n);
    }
    T = cu.back();
    batch = AttentionBatch{static_cast<int>(seqs.size()), cu.data(), ctx.data(), tables.data(),
                           max_blocks};
  }
};

// Largest |a - b| over each output row relative to the row's largest |b|.
inline double max_row_rel_error(const std::vector<float>& a, const std::vector<float>& b, int D) {
  double worst = 0;
  for (size_t r = 0; r + D <= b.size(); r += D) {
    double scale = 1e-30, diff = 0;
    for (int d = 0; d < D; ++d) {
      scale = std::max(scale, static_cast<double>(std::abs(b[r + d])));
      const double e = std::abs(static_cast<double>(a[r + d]) - b[r + d]);
      diff = std::isnan(e) ? INFINITY : std::max(diff, e);
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

}  // namespace vlm::testing_sparse
