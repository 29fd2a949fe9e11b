#include "kernels/kv_compression/attention_scores.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/core/thread_pool.h"

namespace vlm {

namespace {

void check_score_args(const float* q, int32_t R, int H, const PagedKVLayer& kv, const int32_t* block_table,
                      int32_t first_pos, const float* scores, int64_t stride) {
  VLM_CHECK(q && scores && block_table && kv.k && kv.v, "null pointer");
  VLM_CHECK(kv.num_kv_heads > 0 && H % kv.num_kv_heads == 0, "H={} Hkv={}", H, kv.num_kv_heads);
  VLM_CHECK(R >= 0 && first_pos >= 0 && stride >= first_pos + R, "R={} first_pos={} stride={}", R, first_pos, stride);
}

}  // namespace

void gather_kv_head(const PagedKVLayer& kv, const int32_t* block_table, int32_t n, int h, float* k_out,
                    float* v_out) {
  const int D = kv.head_dim;
  for_each_head_block(kv, block_table, n, h, [&](int64_t off, int32_t j0, int32_t cnt) {
    if (k_out) convert_to_f32(static_cast<const uint8_t*>(kv.k) + off, kv.dtype, k_out + int64_t(j0) * D, int64_t(cnt) * D);
    if (v_out) convert_to_f32(static_cast<const uint8_t*>(kv.v) + off, kv.dtype, v_out + int64_t(j0) * D, int64_t(cnt) * D);
  });
}

void accumulate_attention_scores(const float* q, int32_t R, int num_heads, const PagedKVLayer& kv,
                                 const int32_t* block_table, int32_t first_pos, float scale, float* scores,
                                 int64_t stride) {
  if (R == 0) return;
  check_score_args(q, R, num_heads, kv, block_table, first_pos, scores, stride);
  const int H = num_heads, Hkv = kv.num_kv_heads, G = H / Hkv, D = kv.head_dim;
  const int32_t S = first_pos + R;
  constexpr int32_t kRowTile = 32;  // query rows per sgemm
  global_thread_pool().run_tasks(Hkv, [&](int64_t hk) {
    std::vector<float> k(static_cast<size_t>(S) * D);
    gather_kv_head(kv, block_table, S, static_cast<int>(hk), k.data(), nullptr);
    std::vector<float> qt(static_cast<size_t>(kRowTile) * G * D);   // [rows*G, D]
    std::vector<float> logits(static_cast<size_t>(kRowTile) * G * S);  // [rows*G, S]
    std::vector<float> col(S, 0.0f);
    for (int32_t r0 = 0; r0 < R; r0 += kRowTile) {
      const int32_t rows = std::min(kRowTile, R - r0);
      const int32_t keys = first_pos + r0 + rows;  // keys any row of the tile can see
      for (int32_t r = 0; r < rows; ++r)
        for (int g = 0; g < G; ++g)
          std::copy_n(q + (static_cast<int64_t>(r0 + r) * H + hk * G + g) * D, D,
                      qt.data() + (static_cast<size_t>(r) * G + g) * D);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows * G, keys, D, scale, qt.data(), D, k.data(), D, 0.0f,
                  logits.data(), keys);
      for (int32_t r = 0; r < rows; ++r) {
        const int32_t n = first_pos + r0 + r + 1;  // causal range of this row
        for (int g = 0; g < G; ++g) {
          float* row = logits.data() + (static_cast<size_t>(r) * G + g) * keys;
          float mx = -INFINITY;
          for (int32_t j = 0; j < n; ++j) mx = std::max(mx, row[j]);
          float sum = 0.0f;
          for (int32_t j = 0; j < n; ++j) sum += (row[j] = std::exp(row[j] - mx));
          const float inv = 1.0f / sum;
          for (int32_t j = 0; j < n; ++j) col[j] += row[j] * inv;
        }
      }
    }
    float* out = scores + hk * stride;
    for (int32_t j = 0; j < S; ++j) out[j] += col[j];
  });
}

void accumulate_attention_scores_ref(const float* q, int32_t R, int num_heads, const PagedKVLayer& kv,
                                     const int32_t* block_table, int32_t first_pos, float scale, float* scores,
                                     int64_t stride) {
  if (R == 0) return;
  check_score_args(q, R, num_heads, kv, block_table, first_pos, scores, stride);
  const int H = num_heads, Hkv = kv.num_kv_heads, G = H / Hkv, D = kv.head_dim, B = kv.block_size;
  const int32_t S = first_pos + R;
  for (int h = 0; h < H; ++h) {
    const int hk = h / G;
    // The dense attention matrix A[R, S] of this query head (zero above the causal diagonal).
    std::vector<double> A(static_cast<size_t>(R) * S, 0.0);
    for (int32_t r = 0; r < R; ++r) {
      const int32_t n = first_pos + r + 1;
      const float* qv = q + (static_cast<int64_t>(r) * H + h) * D;
      double mx = -INFINITY;
      for (int32_t j = 0; j < n; ++j) {
        const int64_t base = block_table[j / B] * kv.block_stride() + hk * kv.head_stride() + int64_t(j % B) * D;
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += double(qv[d]) * load_as_f32(kv.k, kv.dtype, base + d);
        A[size_t(r) * S + j] = dot * scale;
        mx = std::max(mx, dot * scale);
      }
      double sum = 0;
      for (int32_t j = 0; j < n; ++j) sum += (A[size_t(r) * S + j] = std::exp(A[size_t(r) * S + j] - mx));
      for (int32_t j = 0; j < n; ++j) A[size_t(r) * S + j] /= sum;
    }
    for (int32_t j = 0; j < S; ++j) {
      double c = 0;
      for (int32_t r = 0; r < R; ++r) c += A[size_t(r) * S + j];
      scores[hk * stride + j] += static_cast<float>(c);
    }
  }
}

}  // namespace vlm
