#include "kernels/kv_compression/kv_merge.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "kernels/core/check.h"

namespace vlm {

namespace {

void check_merge_args(int32_t L, const std::vector<int32_t>& kept) {
  for (size_t i = 0; i < kept.size(); ++i)
    VLM_CHECK(kept[i] >= 0 && kept[i] < L && (i == 0 || kept[i] > kept[i - 1]), "kept[{}] = {} (L={})", i, kept[i], L);
}

// Folds evicted row x_e (weight w, matched to kept row c) into the accumulator acc_c.
inline void fold(KVMerge merge, const float* xe, const float* xc, float w, float* acc, int D) {
  switch (merge) {
    case KVMerge::Average: for (int d = 0; d < D; ++d) acc[d] += xe[d]; break;
    case KVMerge::Pivot: for (int d = 0; d < D; ++d) acc[d] += 0.5f * (xe[d] + xc[d]); break;
    case KVMerge::Weighted: for (int d = 0; d < D; ++d) acc[d] += w * xe[d]; break;
    case KVMerge::None: break;
  }
}

}  // namespace

void merge_kept_kv(const float* k, const float* v, int32_t L, int D, const std::vector<int32_t>& kept, KVMerge merge,
                   float* k_out, float* v_out) {
  check_merge_args(L, kept);
  const auto C = static_cast<int32_t>(kept.size());
  for (int32_t c = 0; c < C; ++c) {
    std::copy_n(k + int64_t(kept[c]) * D, D, k_out + int64_t(c) * D);
    std::copy_n(v + int64_t(kept[c]) * D, D, v_out + int64_t(c) * D);
  }
  if (merge == KVMerge::None || C == L || C == 0) return;
  // Evicted positions, and unit keys of both sets.
  std::vector<int32_t> evicted;
  evicted.reserve(L - C);
  for (int32_t j = 0, i = 0; j < L; ++j) {
    if (i < C && kept[i] == j) ++i;
    else evicted.push_back(j);
  }
  auto unit = [&](int32_t j, float* dst) {
    const float* x = k + int64_t(j) * D;
    float n2 = 0;
    for (int d = 0; d < D; ++d) n2 += x[d] * x[d];
    const float inv = n2 > 0 ? 1.0f / std::sqrt(n2) : 0.0f;
    for (int d = 0; d < D; ++d) dst[d] = x[d] * inv;
  };
  std::vector<float> kc(size_t(C) * D);
  for (int32_t c = 0; c < C; ++c) unit(kept[c], kc.data() + size_t(c) * D);
  std::vector<float> k_acc(k_out, k_out + size_t(C) * D), v_acc(v_out, v_out + size_t(C) * D);
  std::vector<int32_t> count(C, 0);
  constexpr int32_t kTile = 64;  // evicted rows per sgemm
  std::vector<float> ke(size_t(kTile) * D), sim(size_t(kTile) * C);
  const auto E = static_cast<int32_t>(evicted.size());
  for (int32_t e0 = 0; e0 < E; e0 += kTile) {
    const int32_t rows = std::min(kTile, E - e0);
    for (int32_t r = 0; r < rows; ++r) unit(evicted[e0 + r], ke.data() + size_t(r) * D);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, C, D, 1.0f, ke.data(), D, kc.data(), D, 0.0f,
                sim.data(), C);
    for (int32_t r = 0; r < rows; ++r) {
      const float* s = sim.data() + size_t(r) * C;
      const int32_t c = static_cast<int32_t>(std::max_element(s, s + C) - s);  // first maximum
      const int32_t e = evicted[e0 + r];
      fold(merge, k + int64_t(e) * D, k_out + int64_t(c) * D, s[c], k_acc.data() + size_t(c) * D, D);
      fold(merge, v + int64_t(e) * D, v_out + int64_t(c) * D, s[c], v_acc.data() + size_t(c) * D, D);
      ++count[c];
    }
  }
  for (int32_t c = 0; c < C; ++c) {
    if (count[c] == 0) continue;
    const float inv = 1.0f / static_cast<float>(count[c] + 1);
    for (int d = 0; d < D; ++d) {
      k_out[int64_t(c) * D + d] = k_acc[size_t(c) * D + d] * inv;
      v_out[int64_t(c) * D + d] = v_acc[size_t(c) * D + d] * inv;
    }
  }
}

void merge_kept_kv_ref(const float* k, const float* v, int32_t L, int D, const std::vector<int32_t>& kept,
                       KVMerge merge, float* k_out, float* v_out) {
  check_merge_args(L, kept);
  const auto C = static_cast<int32_t>(kept.size());
  std::vector<double> ks(size_t(C) * D), vs(size_t(C) * D);
  std::vector<int32_t> count(C, 0);
  for (int32_t c = 0; c < C; ++c)
    for (int d = 0; d < D; ++d) {
      ks[size_t(c) * D + d] = k[int64_t(kept[c]) * D + d];
      vs[size_t(c) * D + d] = v[int64_t(kept[c]) * D + d];
    }
  auto norm = [&](int32_t j) {
    double n2 = 0;
    for (int d = 0; d < D; ++d) n2 += double(k[int64_t(j) * D + d]) * k[int64_t(j) * D + d];
    return std::sqrt(n2);
  };
  if (merge != KVMerge::None && C > 0) {
    for (int32_t e = 0; e < L; ++e) {
      if (std::binary_search(kept.begin(), kept.end(), e)) continue;
      int32_t best = 0;
      double best_sim = -INFINITY;
      for (int32_t c = 0; c < C; ++c) {
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += double(k[int64_t(e) * D + d]) * k[int64_t(kept[c]) * D + d];
        const double den = norm(e) * norm(kept[c]);
        const double s = den > 0 ? dot / den : 0.0;
        if (s > best_sim) best_sim = s, best = c;
      }
      const int32_t c = best, j = kept[c];
      for (int d = 0; d < D; ++d) {
        const double xe_k = k[int64_t(e) * D + d], xc_k = k[int64_t(j) * D + d];
        const double xe_v = v[int64_t(e) * D + d], xc_v = v[int64_t(j) * D + d];
        double* ak = &ks[size_t(c) * D + d];
        double* av = &vs[size_t(c) * D + d];
        if (merge == KVMerge::Average) *ak += xe_k, *av += xe_v;
        if (merge == KVMerge::Pivot) *ak += (xe_k + xc_k) / 2, *av += (xe_v + xc_v) / 2;
        if (merge == KVMerge::Weighted) *ak += best_sim * xe_k, *av += best_sim * xe_v;
      }
      ++count[c];
    }
  }
  for (int32_t c = 0; c < C; ++c)
    for (int d = 0; d < D; ++d) {
      k_out[int64_t(c) * D + d] = static_cast<float>(ks[size_t(c) * D + d] / (count[c] + 1));
      v_out[int64_t(c) * D + d] = static_cast<float>(vs[size_t(c) * D + d] / (count[c] + 1));
    }
}

}  // namespace vlm
