// LOOK-M eviction (paper §3.2, eqs. 5-8): which cache positions of one KV head survive.
//
// For a cache of L tokens and budget (M recent, N important), when M + N < L:
//   kept = the recent window [L - M, L)  ∪  the top N of [0, L - M) by rank, where rank is
//   - text prior (eq. 5, A_s[T] += max A_s): text tokens first, then by score;
//   - otherwise: the first num_sink_tokens positions first (score = +inf in the reference),
//     then by score;
//   ties broken by the lower position. Adding max(A_s) to text scores orders exactly as "text
//   first, then score" except for exact ties, which this rule settles the same way every time.
// When M + N >= L every position is kept. The result has exactly min(L, M + N) positions.
//
// select_kept_tokens: nth_element on a packed rank key. select_kept_tokens_ref: N rounds of
// an explicit argmax over a std::set of candidates.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kv_compression/look_m_params.h"

namespace vlm {

// scores[L] (any finite values), is_text[L] (1 = text token). Returns kept positions ascending.
std::vector<int32_t> select_kept_tokens(const float* scores /*[L]*/, const uint8_t* is_text /*[L]*/, int32_t L,
                                        const LookMParams& p, LookMBudget budget);
std::vector<int32_t> select_kept_tokens_ref(const float* scores /*[L]*/, const uint8_t* is_text /*[L]*/, int32_t L,
                                            const LookMParams& p, LookMBudget budget);

}  // namespace vlm
