// LOOK-M merging (paper §3.3, eqs. 9-12) for one KV head: every evicted position e is matched
// to its most similar kept position c*(e) = argmax_c cos(k_e, k_c) (keys only; ties: the lower
// kept index), w_e = that cosine; the same assignment is applied to values. With E_c the evicted
// positions matched to c (n_c of them) and x standing for k or v:
//   Average  (eq. 10): x_c <- (x_c + Σ_{e∈E_c} x_e) / (n_c + 1)
//   Pivot    (eq. 11): x_c <- (x_c + Σ_{e∈E_c} (x_e + x_c) / 2) / (n_c + 1)
//   Weighted (eq. 12): x_c <- (x_c + Σ_{e∈E_c} w_e · x_e) / (n_c + 1)
//   None: x_c unchanged (plain eviction).
// The reference code's similarity filter for avg/weighted (evicted ranks whose head-averaged
// similarity is below the mean are dropped) is not reproduced: ranks differ per head, so it
// has no per-head meaning; every evicted token is merged, as in the paper.
//
// merge_kept_kv: keys normalised once, cosine matrix by sgemm over tiles of evicted rows.
// merge_kept_kv_ref: per pair cosine in double, explicit sums.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kv_compression/look_m_params.h"

namespace vlm {

// k, v [L, D] f32 (one head, all positions); kept: ascending positions in [0, L). Writes the
// kept rows, merged, in kept order to k_out, v_out [kept.size(), D].
void merge_kept_kv(const float* k /*[L,D]*/, const float* v /*[L,D]*/, int32_t L, int D,
                   const std::vector<int32_t>& kept, KVMerge merge, float* k_out /*[C,D]*/,
                   float* v_out /*[C,D]*/);
void merge_kept_kv_ref(const float* k /*[L,D]*/, const float* v /*[L,D]*/, int32_t L, int D,
                       const std::vector<int32_t>& kept, KVMerge merge, float* k_out /*[C,D]*/,
                       float* v_out /*[C,D]*/);

}  // namespace vlm
