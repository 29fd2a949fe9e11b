#include "kernels/sink_router/sink_routing.h"

#include <algorithm>
#include <cmath>

#include "kernels/core/check.h"

namespace vlm {
namespace {

template <typename Acc>
Acc aggregate(SinkAggregation agg, Acc acc, Acc x, int i) {
  if (i == 0) return x;
  switch (agg) {
    case SinkAggregation::Min: return std::min(acc, x);
    case SinkAggregation::Max: return std::max(acc, x);
    case SinkAggregation::Mean: return acc + x;
  }
  return acc;
}

template <typename Acc>
void group_scores(const float* q, int H, const float* anchor_k, int Hkv, int D,
                  SinkAggregation agg, float* scores) {
  VLM_CHECK(H > 0 && Hkv > 0 && H % Hkv == 0 && D > 0, "H={} Hkv={} D={}", H, Hkv, D);
  const int G = H / Hkv;
  for (int g = 0; g < Hkv; ++g) {
    const float* a = anchor_k + static_cast<int64_t>(g) * D;
    Acc aa = 0;
    for (int d = 0; d < D; ++d) aa += static_cast<Acc>(a[d]) * a[d];
    Acc s = 0;
    for (int i = 0; i < G; ++i) {
      const float* qh = q + static_cast<int64_t>(g * G + i) * D;
      Acc qa = 0, qq = 0;
      for (int d = 0; d < D; ++d) {
        qa += static_cast<Acc>(qh[d]) * a[d];
        qq += static_cast<Acc>(qh[d]) * qh[d];
      }
      const Acc den = std::sqrt(qq) * std::sqrt(aa);
      const Acc cos = den > 0 ? qa / den : Acc(0);
      s = aggregate<Acc>(agg, s, cos, i);
    }
    if (agg == SinkAggregation::Mean) s /= G;
    scores[g] = static_cast<float>(s);
  }
}

}  // namespace

void sink_group_scores(const float* q, int num_heads, const float* anchor_k, int num_kv_heads,
                       int head_dim, SinkAggregation agg, float* scores) {
  group_scores<float>(q, num_heads, anchor_k, num_kv_heads, head_dim, agg, scores);
}

void sink_group_scores_ref(const float* q, int num_heads, const float* anchor_k,
                           int num_kv_heads, int head_dim, SinkAggregation agg, float* scores) {
  group_scores<double>(q, num_heads, anchor_k, num_kv_heads, head_dim, agg, scores);
}

int sink_route_groups(const float* scores, int num_kv_heads, double tau, uint8_t* skip) {
  int n = 0;
  for (int g = 0; g < num_kv_heads; ++g) {
    skip[g] = static_cast<double>(scores[g]) >= tau ? 1 : 0;
    n += skip[g];
  }
  return n;
}

}  // namespace vlm
