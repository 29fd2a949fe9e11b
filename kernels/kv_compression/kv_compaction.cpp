#include "kernels/kv_compression/kv_compaction.h"

#include <algorithm>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/kv_compression/attention_scores.h"
#include "kernels/kv_compression/kv_merge.h"
#include "kernels/kv_compression/token_selection.h"
#include "kernels/core/thread_pool.h"

namespace vlm {

void scatter_kv_head(const PagedKVLayer& kv, const int32_t* block_table, int32_t n, int h, const float* k,
                     const float* v) {
  const int D = kv.head_dim;
  for_each_head_block(kv, block_table, n, h, [&](int64_t off, int32_t j0, int32_t cnt) {
    convert_from_f32(k + int64_t(j0) * D, kv.dtype, static_cast<uint8_t*>(kv.k) + off, int64_t(cnt) * D);
    convert_from_f32(v + int64_t(j0) * D, kv.dtype, static_cast<uint8_t*>(kv.v) + off, int64_t(cnt) * D);
  });
}

namespace {

template <bool kRef>
int32_t compact_impl(const PagedKVLayer& kv, const int32_t* block_table, int32_t L, const float* scores,
                     int64_t stride, const uint8_t* is_text, const LookMParams& p) {
  validate(p);
  VLM_CHECK(kv.k && kv.v && block_table && scores && is_text, "null pointer");
  VLM_CHECK(L >= 0 && stride >= L, "L={} stride={}", L, stride);
  const LookMBudget budget = look_m_budget(p, L);
  if (budget.kept() >= L) return L;
  const int D = kv.head_dim;
  const int32_t C = budget.kept();
  auto head = [&](int64_t h) {
    std::vector<float> k(size_t(L) * D), v(size_t(L) * D), ko(size_t(C) * D), vo(size_t(C) * D);
    gather_kv_head(kv, block_table, L, static_cast<int>(h), k.data(), v.data());
    const float* s = scores + h * stride;
    const std::vector<int32_t> kept =
        kRef ? select_kept_tokens_ref(s, is_text, L, p, budget) : select_kept_tokens(s, is_text, L, p, budget);
    VLM_CHECK(static_cast<int32_t>(kept.size()) == C, "head {} keeps {} of {} tokens, budget {}", h, kept.size(), L, C);
    if (kRef) merge_kept_kv_ref(k.data(), v.data(), L, D, kept, p.merge, ko.data(), vo.data());
    else merge_kept_kv(k.data(), v.data(), L, D, kept, p.merge, ko.data(), vo.data());
    scatter_kv_head(kv, block_table, C, static_cast<int>(h), ko.data(), vo.data());
  };
  if (kRef) {
    for (int h = 0; h < kv.num_kv_heads; ++h) head(h);
  } else {
    global_thread_pool().run_tasks(kv.num_kv_heads, head);
  }
  return C;
}

}  // namespace

int32_t compact_sequence_kv(const PagedKVLayer& kv, const int32_t* block_table, int32_t L, const float* scores,
                            int64_t stride, const uint8_t* is_text, const LookMParams& p) {
  return compact_impl<false>(kv, block_table, L, scores, stride, is_text, p);
}

int32_t compact_sequence_kv_ref(const PagedKVLayer& kv, const int32_t* block_table, int32_t L, const float* scores,
                                int64_t stride, const uint8_t* is_text, const LookMParams& p) {
  return compact_impl<true>(kv, block_table, L, scores, stride, is_text, p);
}

}  // namespace vlm
