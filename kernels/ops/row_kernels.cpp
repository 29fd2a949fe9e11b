// Portable scalar row kernels and the run-time choice of the best table (see row_kernels.h).
#include "kernels/ops/row_kernels.h"

#include "kernels/core/cpu_features.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>

namespace vlm {
namespace {

void exp_scalar(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

double sum_squares_scalar(const float* x, int64_t n) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * x[i];
  return acc;
}

void scale_mul_scalar(const float* x, float s, const float* w, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float xs = x[i] * s;
    y[i] = w[i] * xs;
  }
}

void silu_mul_scalar(const float* g, const float* u, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i];
    float silu = gi / (1.0f + std::exp(-gi));
    out[i] = silu * u[i];
  }
}

void softmax_scalar(float* x, int64_t n) {
  if (n <= 0) return;
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::fmax(m, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void add_scalar(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void block_max_scalar(const float* x, int64_t n, int64_t block, float* out) {
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t i = b0; i < std::min(n, b0 + block); ++i) m = std::max(m, x[i]);
    *out++ = m;
  }
}

double exp_sum_scalar(const float* x, int64_t n, float s, float m, float* y) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float xs = x[i] * s;  // separate statements: the product is rounded first
    const float e = std::exp(xs - m);
    if (y) y[i] = e;
    sum += e;
  }
  return sum;
}

void rotate_half_scalar(float* x, const float* c, const float* s, int64_t h) {
  float* x1 = x;
  float* x2 = x + h;
  for (int64_t i = 0; i < h; ++i) {
    // Separate statements: each product is rounded before the sum (see row_kernels.h).
    float a1 = x1[i] * c[i], b1 = x2[i] * s[i];
    float a2 = x2[i] * c[i], b2 = x1[i] * s[i];
    x1[i] = a1 - b1;
    x2[i] = a2 + b2;
  }
}

}  // namespace

const RowKernels kRowKernelsScalar = {
    "scalar",        exp_scalar, sum_squares_scalar, scale_mul_scalar, silu_mul_scalar,
    softmax_scalar,  add_scalar, block_max_scalar, exp_sum_scalar, rotate_half_scalar,
};

const RowKernels* row_kernels_for(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return &kRowKernelsScalar;
#if defined(__x86_64__) || defined(__i386__)
    case Isa::Avx2:
      return cpu_has_avx2_fma() ? &kRowKernelsAvx2 : nullptr;
    case Isa::Avx512:
      return cpu_has_avx512() ? &kRowKernelsAvx512 : nullptr;
#endif
    default: return nullptr;
  }
}

const RowKernels& row_kernels() {
  if (use_avx512()) return kRowKernelsAvx512;
  return cpu_has_avx2_fma() ? kRowKernelsAvx2 : kRowKernelsScalar;
}

}  // namespace vlm
