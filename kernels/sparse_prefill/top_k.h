// Indices of the k largest scores, the selection step of the vertical-slash estimates.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace vlm {

// The indices of the min(k, size) largest entries of `score`, largest first; ties: the smaller
// index first (deterministic plans).
inline std::vector<int32_t> top_k_indices(const std::vector<float>& score, int k) {
  std::vector<int32_t> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min<int>(k, static_cast<int>(idx.size()));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  idx.resize(k);
  return idx;
}

}  // namespace vlm
