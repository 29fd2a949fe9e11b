#include "kernels/sparse_prefill/last_q_attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "kernels/core/check.h"

namespace vlm {

void last_q_attention(const float* q, const int32_t* q_pos, int R, const float* keys, int N, int D,
                      float scale, float* probs) {
  if (R <= 0) return;
  for (int r = 0; r < R; ++r)
    VLM_CHECK(q_pos[r] >= 0 && q_pos[r] < N, "estimation row {} at position {} of {} keys", r, q_pos[r], N);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, R, N, D, scale, q, D, keys, D, 0.0f, probs, N);
  for (int r = 0; r < R; ++r) {
    float* row = probs + static_cast<size_t>(r) * N;
    const int n = q_pos[r] + 1;
    const float mx = *std::max_element(row, row + n);
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum += (row[j] = std::exp(row[j] - mx));
    const float inv = 1.0f / sum;
    for (int j = 0; j < n; ++j) row[j] *= inv;
    std::fill(row + n, row + N, 0.0f);
  }
}

}  // namespace vlm
