// Naive references of kernels/ops/ops.h (see ops_ref.h): one element at a time, in double.
#include "kernels/ops/ops_ref.h"

#include <cmath>
#include <limits>

#include "kernels/core/check.h"
#include "kernels/core/dtype.h"

namespace vlm {

void rms_norm_ref(const float* x, const TensorView& w, float eps, int64_t T, float* y) {
  VLM_CHECK(w.ndim() == 1, "rms_norm weight must be 1-D, got {}", w.shape.str());
  const int64_t C = w.dim(0);
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = x + t * C;
    double ss = 0.0;
    for (int64_t c = 0; c < C; ++c) ss += static_cast<double>(xr[c]) * xr[c];
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    for (int64_t c = 0; c < C; ++c) {
      const double wc = load_as_f32(w.data, w.dtype, c);
      y[t * C + c] = static_cast<float>(wc * (xr[c] * r));
    }
  }
}

void silu_mul_ref(const float* gate, const float* up, int64_t T, int64_t I, float* out) {
  for (int64_t i = 0; i < T * I; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void softmax_rows_ref(float* x, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * n;
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < n; ++i) m = row[i] > m ? row[i] : m;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(row[i] - m);
    for (int64_t i = 0; i < n; ++i) row[i] = static_cast<float>(std::exp(row[i] - m) / sum);
  }
}

void add_inplace_ref(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] + x[i];
}

void embedding_lookup_ref(const TensorView& table, const int32_t* ids, int64_t T, float* out) {
  VLM_CHECK(table.ndim() == 2, "embedding table must be 2-D, got {}", table.shape.str());
  const int64_t V = table.dim(0), C = table.dim(1);
  for (int64_t t = 0; t < T; ++t) {
    VLM_CHECK(ids[t] >= 0 && ids[t] < V, "token id {} at t={} outside the table's {} rows",
              ids[t], t, V);
    for (int64_t c = 0; c < C; ++c) out[t * C + c] = load_as_f32(table.data, table.dtype, ids[t] * C + c);
  }
}

}  // namespace vlm
