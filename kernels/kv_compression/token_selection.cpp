#include "kernels/kv_compression/token_selection.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "kernels/core/check.h"

namespace vlm {

namespace {

// Higher rank first: (priority class, score, -position).
struct Rank {
  bool prior;
  float score;
  int32_t pos;
};
bool before(const Rank& a, const Rank& b) {
  if (a.prior != b.prior) return a.prior;
  if (a.score != b.score) return a.score > b.score;
  return a.pos < b.pos;
}
bool has_prior(const uint8_t* is_text, int32_t j, const LookMParams& p) {
  return p.text_prior ? is_text[j] != 0 : j < p.num_sink_tokens;
}

}  // namespace

std::vector<int32_t> select_kept_tokens(const float* scores, const uint8_t* is_text, int32_t L, const LookMParams& p,
                                        LookMBudget budget) {
  VLM_CHECK(L >= 0 && budget.recent >= 0 && budget.important >= 0, "L={} M={} N={}", L, budget.recent,
            budget.important);
  std::vector<int32_t> kept;
  if (budget.kept() >= L) {
    kept.resize(L);
    std::iota(kept.begin(), kept.end(), 0);
    return kept;
  }
  const int32_t cand = L - budget.recent;  // candidates [0, cand); N < cand here
  std::vector<Rank> r(cand);
  for (int32_t j = 0; j < cand; ++j) r[j] = {has_prior(is_text, j, p), scores[j], j};
  const int32_t N = budget.important;
  std::nth_element(r.begin(), r.begin() + N, r.end(), before);
  kept.reserve(budget.kept());
  for (int32_t i = 0; i < N; ++i) kept.push_back(r[i].pos);
  std::sort(kept.begin(), kept.end());
  for (int32_t j = cand; j < L; ++j) kept.push_back(j);
  return kept;
}

std::vector<int32_t> select_kept_tokens_ref(const float* scores, const uint8_t* is_text, int32_t L,
                                            const LookMParams& p, LookMBudget budget) {
  std::set<int32_t> kept;
  if (budget.kept() >= L) {
    for (int32_t j = 0; j < L; ++j) kept.insert(j);
    return {kept.begin(), kept.end()};
  }
  std::set<int32_t> candidates;
  for (int32_t j = 0; j < L - budget.recent; ++j) candidates.insert(j);
  for (int32_t j = L - budget.recent; j < L; ++j) kept.insert(j);
  for (int32_t n = 0; n < budget.important; ++n) {
    int32_t best = -1;
    for (int32_t j : candidates)
      if (best < 0 || before({has_prior(is_text, j, p), scores[j], j}, {has_prior(is_text, best, p), scores[best], best}))
        best = j;
    kept.insert(best);
    candidates.erase(best);
  }
  return {kept.begin(), kept.end()};
}

}  // namespace vlm
