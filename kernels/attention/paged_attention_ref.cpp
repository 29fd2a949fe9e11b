// Naive paged attention: gather each sequence's K/V into contiguous arrays, then for every query
// row and head a plain two-pass softmax in double over the causal key range.
#include <cmath>
#include <vector>

#include "kernels/attention/paged_attention.h"
#include "kernels/attention/paged_attention_internal.h"

namespace vlm {

void paged_attention_ref(const float* q /*[T,H,D]*/, int num_heads, const PagedKVLayer& kv,
                         const AttentionBatch& batch, float scale, float* out /*[T,H,D]*/) {
  attn::check_attention_args(q, num_heads, kv, batch, out);
  const int H = num_heads;
  const int Hkv = kv.num_kv_heads;
  const int G = H / Hkv;
  const int D = kv.head_dim;
  const int B = kv.block_size;

  std::vector<double> k, v, scores;  // k, v: [S, Hkv, D]; scores: [S]
  for (int s = 0; s < batch.num_seqs; ++s) {
    const int t0 = batch.cu_seqlens_q[s];
    const int q_len = batch.cu_seqlens_q[s + 1] - t0;
    const int S = batch.context_lens[s];
    if (q_len == 0) continue;
    const int32_t* table = batch.block_tables + static_cast<int64_t>(s) * batch.max_blocks_per_seq;

    // Gather the sequence's keys and values: position j lives in block table[j / B], slot j % B.
    k.assign(static_cast<size_t>(S) * Hkv * D, 0.0);
    v.assign(k.size(), 0.0);
    for (int j = 0; j < S; ++j) {
      const int64_t block = table[j / B];
      for (int h = 0; h < Hkv; ++h)
        for (int d = 0; d < D; ++d) {
          const int64_t src = block * kv.block_stride() + h * kv.head_stride() +
                              static_cast<int64_t>(j % B) * D + d;
          const size_t dst = (static_cast<size_t>(j) * Hkv + h) * D + d;
          k[dst] = load_as_f32(kv.k, kv.dtype, src);
          v[dst] = load_as_f32(kv.v, kv.dtype, src);
        }
    }

    scores.resize(S);
    for (int i = 0; i < q_len; ++i) {
      const int pos = S - q_len + i;  // cache position of this query row
      for (int h = 0; h < H; ++h) {
        const int hk = h / G;
        const float* qv = q + (static_cast<int64_t>(t0 + i) * H + h) * D;
        double mx = -INFINITY;
        for (int j = 0; j <= pos; ++j) {
          const double* kj = &k[(static_cast<size_t>(j) * Hkv + hk) * D];
          double dot = 0.0;
          for (int d = 0; d < D; ++d) dot += static_cast<double>(qv[d]) * kj[d];
          scores[j] = dot * scale;
          mx = std::max(mx, scores[j]);
        }
        double sum = 0.0;
        for (int j = 0; j <= pos; ++j) {
          scores[j] = std::exp(scores[j] - mx);
          sum += scores[j];
        }
        float* o = out + (static_cast<int64_t>(t0 + i) * H + h) * D;
        for (int d = 0; d < D; ++d) {
          double acc = 0.0;
          for (int j = 0; j <= pos; ++j)
            acc += scores[j] * v[(static_cast<size_t>(j) * Hkv + hk) * D + d];
          o[d] = static_cast<float>(acc / sum);
        }
      }
    }
  }
}

}  // namespace vlm
