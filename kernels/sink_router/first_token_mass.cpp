#include "kernels/sink_router/first_token_mass.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/core/check.h"

namespace vlm {
namespace {

void check_args(int H, const PagedKVLayer& kv, const int32_t* table, int ctx) {
  VLM_CHECK(H > 0 && kv.num_kv_heads > 0 && H % kv.num_kv_heads == 0, "H={} Hkv={}", H, kv.num_kv_heads);
  VLM_CHECK(ctx >= 1, "context_len {} < 1", ctx);
  const int nb = (ctx + kv.block_size - 1) / kv.block_size;
  for (int j = 0; j < nb; ++j)
    VLM_CHECK(table[j] >= 0 && table[j] < kv.num_blocks, "block_table[{}] = {} outside [0, {})", j, table[j],
              kv.num_blocks);
}

int64_t key_offset(const PagedKVLayer& kv, const int32_t* table, int kvh, int j) {
  return table[j / kv.block_size] * kv.block_stride() + kvh * kv.head_stride() +
         static_cast<int64_t>(j % kv.block_size) * kv.head_dim;
}

}  // namespace

void first_token_attention_mass(const float* q, int num_heads, const PagedKVLayer& kv, const int32_t* block_table,
                                int context_len, float scale, float* mass) {
  check_args(num_heads, kv, block_table, context_len);
  const int Hkv = kv.num_kv_heads, G = num_heads / Hkv, D = kv.head_dim;
  std::vector<float> key(D), logits(static_cast<size_t>(G) * context_len);
  for (int g = 0; g < Hkv; ++g) {
    for (int j = 0; j < context_len; ++j) {  // the group's keys are read once for its G heads
      convert_to_f32(static_cast<const char*>(kv.k) + key_offset(kv, block_table, g, j) * dtype_size(kv.dtype),
                     kv.dtype, key.data(), D);
      for (int i = 0; i < G; ++i) {
        const float* qh = q + static_cast<int64_t>(g * G + i) * D;
        float dot = 0.0f;
        for (int d = 0; d < D; ++d) dot += qh[d] * key[d];
        logits[static_cast<size_t>(i) * context_len + j] = dot * scale;
      }
    }
    for (int i = 0; i < G; ++i) {
      const float* s = logits.data() + static_cast<size_t>(i) * context_len;
      const float mx = *std::max_element(s, s + context_len);
      float sum = 0.0f;
      for (int j = 0; j < context_len; ++j) sum += std::exp(s[j] - mx);
      mass[g * G + i] = std::exp(s[0] - mx) / sum;
    }
  }
}

void first_token_attention_mass_ref(const float* q, int num_heads, const PagedKVLayer& kv,
                                    const int32_t* block_table, int context_len, float scale, float* mass) {
  check_args(num_heads, kv, block_table, context_len);
  const int Hkv = kv.num_kv_heads, G = num_heads / Hkv, D = kv.head_dim;
  std::vector<double> s(context_len);
  for (int h = 0; h < num_heads; ++h) {
    const int g = h / G;
    for (int j = 0; j < context_len; ++j) {
      const int64_t off = key_offset(kv, block_table, g, j);
      double dot = 0.0;
      for (int d = 0; d < D; ++d) dot += static_cast<double>(q[static_cast<int64_t>(h) * D + d]) * load_as_f32(kv.k, kv.dtype, off + d);
      s[j] = dot * scale;
    }
    const double mx = *std::max_element(s.begin(), s.end());
    double sum = 0.0;
    for (double x : s) sum += std::exp(x - mx);
    mass[h] = static_cast<float>(std::exp(s[0] - mx) / sum);
  }
}

void aggregate_group_mass(const float* mass, int num_heads, int num_kv_heads, SinkAggregation agg,
                          float* group_mass) {
  VLM_CHECK(num_heads > 0 && num_kv_heads > 0 && num_heads % num_kv_heads == 0, "H={} Hkv={}", num_heads,
            num_kv_heads);
  const int G = num_heads / num_kv_heads;
  for (int g = 0; g < num_kv_heads; ++g) {
    const float* m = mass + static_cast<int64_t>(g) * G;
    switch (agg) {
      case SinkAggregation::Min: group_mass[g] = *std::min_element(m, m + G); break;
      case SinkAggregation::Max: group_mass[g] = *std::max_element(m, m + G); break;
      case SinkAggregation::Mean: {
        double t = 0.0;
        for (int i = 0; i < G; ++i) t += m[i];
        group_mass[g] = static_cast<float>(t / G);
        break;
      }
    }
  }
}

}  // namespace vlm
