#include "kernels/attention/dense_attention.h"

#include <cblas.h>

#include <cmath>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/ops/row_kernels.h"
#include "kernels/core/thread_pool.h"

namespace vlm {

void dense_attention(const float* q, const float* k, const float* v, int64_t N, int64_t L, int H,
                     int D, float scale, float* out) {
  VLM_CHECK(N >= 0 && L > 0 && H > 0 && D > 0, "dense_attention N={} L={} H={} D={}", N, L, H, D);
  const int64_t ld = static_cast<int64_t>(H) * D;  // row stride of q, k, v, out
  const RowKernels& rk = row_kernels();
  global_thread_pool().run_tasks(N * H, [&](int64_t task) {
    const int64_t n = task / H, h = task % H;
    const int64_t off = n * L * ld + h * D;
    std::vector<float> s(static_cast<size_t>(L * L));  // scores [L, L]
    // s = scale * q_h · k_h^T (strided head columns read in place).
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(L), static_cast<int>(L), D,
                scale, q + off, static_cast<int>(ld), k + off, static_cast<int>(ld), 0.0f, s.data(),
                static_cast<int>(L));
    for (int64_t i = 0; i < L; ++i) rk.softmax(s.data() + i * L, L);
    // out_h = s · v_h.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(L), D, static_cast<int>(L),
                1.0f, s.data(), static_cast<int>(L), v + off, static_cast<int>(ld), 0.0f, out + off,
                static_cast<int>(ld));
  });
}

void dense_attention_ref(const float* q, const float* k, const float* v, int64_t N, int64_t L, int H,
                         int D, float scale, float* out) {
  const int64_t ld = static_cast<int64_t>(H) * D;
  std::vector<double> p(static_cast<size_t>(L));
  for (int64_t n = 0; n < N; ++n)
    for (int h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        const float* qi = q + (n * L + i) * ld + h * D;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < L; ++j) {
          const float* kj = k + (n * L + j) * ld + h * D;
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += static_cast<double>(qi[d]) * kj[d];
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        for (int64_t j = 0; j < L; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (int d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < L; ++j) acc += p[j] * v[(n * L + j) * ld + h * D + d];
          out[(n * L + i) * ld + h * D + d] = static_cast<float>(acc / sum);
        }
      }
}

}  // namespace vlm
