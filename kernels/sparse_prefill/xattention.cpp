#include "kernels/sparse_prefill/xattention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/core/check.h"

namespace vlm {

std::vector<float> xattention_block_scores(const float* q, int H, int head, int q_len, const float* keys,
                                           int N, int D, float scale, int B, int S) {
  VLM_CHECK(S > 0 && B > 0 && B % S == 0 && N >= q_len && q_len > 0, "xattention block {} stride {} q_len {} keys {}",
            B, S, q_len, N);
  const int off = N - q_len;
  const int na = (q_len + S - 1) / S, nb = (N + S - 1) / S;
  const int nqb = (q_len + B - 1) / B, nkb = (N + B - 1) / B;
  const int W = S * D;  // reshaped width
  // Antidiagonal reshape of Q (row a: q[a*S + S-1-s] for s = 0..S-1) and diagonal reshape of K.
  std::vector<float> qr(static_cast<size_t>(na) * W, 0.0f), kr(static_cast<size_t>(nb) * W, 0.0f);
  for (int a = 0; a < na; ++a)
    for (int s = 0; s < S; ++s) {
      const int r = a * S + S - 1 - s;
      if (r < q_len) std::copy_n(q + (static_cast<size_t>(r) * H + head) * D, D, qr.data() + static_cast<size_t>(a) * W + s * D);
    }
  for (int b = 0; b < nb; ++b)
    for (int s = 0; s < S; ++s) {
      const int j = b * S + s;
      if (j < N) std::copy_n(keys + static_cast<size_t>(j) * D, D, kr.data() + static_cast<size_t>(b) * W + s * D);
    }
  std::vector<float> blk(static_cast<size_t>(nqb) * nkb, 0.0f);
  const int rows_per = 256;  // reshaped rows per GEMM panel (bounded memory)
  std::vector<float> sc(static_cast<size_t>(rows_per) * nb);
  for (int a0 = 0; a0 < na; a0 += rows_per) {
    const int n = std::min(rows_per, na - a0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, nb, W, scale / S, qr.data() + static_cast<size_t>(a0) * W, W,
                kr.data(), W, 0.0f, sc.data(), nb);
    for (int i = 0; i < n; ++i) {
      const int a = a0 + i;
      if (a * S >= q_len) continue;  // fully padded row
      float* row = sc.data() + static_cast<size_t>(i) * nb;
      const int allowed = std::min(nb, (off + a * S) / S + 1);
      const float mx = *std::max_element(row, row + allowed);
      float sum = 0.0f;
      for (int b = 0; b < allowed; ++b) sum += (row[b] = std::exp(row[b] - mx));
      const float inv = 1.0f / sum;
      float* out = blk.data() + static_cast<size_t>(a * S / B) * nkb;
      for (int b = 0; b < allowed; ++b) out[b * S / B] += row[b] * inv;
    }
  }
  return blk;
}

HeadPlan xattention_select(const std::vector<float>& blk, int q_len, int N, int B, float threshold,
                           int dense_from) {
  const int off = N - q_len, nqb = (q_len + B - 1) / B, nkb = (N + B - 1) / B;
  VLM_CHECK(static_cast<int>(blk.size()) == nqb * nkb, "xattention scores {} for {}x{} blocks", blk.size(), nqb, nkb);
  if (threshold >= 1.0f) return dense_head_plan(q_len, N, B, B);
  HeadPlan hp = empty_head_plan(nqb);
  std::vector<int32_t> rest;
  std::vector<uint8_t> keep(nkb);
  for (int I = 0; I < nqb; ++I) {
    const float* row = blk.data() + static_cast<size_t>(I) * nkb;
    const int d0 = (off + I * B) / B, d1 = (off + std::min(q_len, (I + 1) * B) - 1) / B;
    if (off + std::min(q_len, (I + 1) * B) - 1 >= dense_from) {  // the dense prompt tail
      for (int J = 0; J <= d1; ++J) hp.blocks.push_back(J * B);
      hp.block_ptr[I + 1] = static_cast<int32_t>(hp.blocks.size());
      continue;
    }
    double total = 0;
    for (int J = 0; J <= d1; ++J) total += row[J];
    const double required = threshold * total;
    std::fill(keep.begin(), keep.end(), 0);
    double cum = 0;
    keep[0] = 1;
    cum += row[0];
    for (int J = std::max(d0, 1); J <= d1; ++J) {
      keep[J] = 1;
      cum += row[J];
    }
    rest.clear();
    for (int J = 1; J < d0; ++J) rest.push_back(J);
    std::stable_sort(rest.begin(), rest.end(), [&](int a, int b) { return row[a] > row[b]; });
    for (int J : rest) {
      if (cum >= required) break;
      keep[J] = 1;
      cum += row[J];
    }
    for (int J = 0; J <= d1; ++J)
      if (keep[J]) hp.blocks.push_back(J * B);
    hp.block_ptr[I + 1] = static_cast<int32_t>(hp.blocks.size());
  }
  return hp;
}

}  // namespace vlm
