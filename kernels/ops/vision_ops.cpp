#include "kernels/ops/vision_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/core/dtype.h"
#include "kernels/core/thread_pool.h"

namespace vlm {
namespace {

constexpr int64_t kMinElemsPerTask = 32 * 1024;

std::vector<float> to_f32(const TensorView& t, int64_t n) {
  VLM_CHECK(t.ndim() == 1 && t.dim(0) == n, "expected a [{}] weight, got {}", n, t.shape.str());
  VLM_CHECK(t.dtype == DType::F32 || t.dtype == DType::BF16 || t.dtype == DType::F16,
            "weight dtype {}", dtype_name(t.dtype));
  std::vector<float> out(static_cast<size_t>(n));
  convert_to_f32(t.data, t.dtype, out.data(), n);
  return out;
}

template <typename Fn>
void for_chunks(int64_t n, int64_t grain, const Fn& fn) {
  if (n <= grain) {
    fn(int64_t{0}, n);
    return;
  }
  global_thread_pool().parallel_for(n, fn, grain);
}

}  // namespace

void layer_norm(const float* x, const TensorView& w, const TensorView& b, float eps, int64_t T,
                float* y) {
  const int64_t C = w.numel();
  VLM_CHECK(T >= 0 && C > 0, "layer_norm T={} C={}", T, C);
  const std::vector<float> wf = to_f32(w, C), bf = to_f32(b, C);
  for_chunks(T, std::max<int64_t>(1, kMinElemsPerTask / C), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* xr = x + t * C;
      float* yr = y + t * C;
      // Two passes in double: the mean, then the centered sum of squares.
      double sum = 0;
      for (int64_t i = 0; i < C; ++i) sum += xr[i];
      const double mean = sum / static_cast<double>(C);
      double sq = 0;
      for (int64_t i = 0; i < C; ++i) {
        const double d = xr[i] - mean;
        sq += d * d;
      }
      const float m = static_cast<float>(mean);
      const float r = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(C) + eps));
      for (int64_t i = 0; i < C; ++i) yr[i] = (xr[i] - m) * r * wf[i] + bf[i];
    }
  });
}

void layer_norm_ref(const float* x, const TensorView& w, const TensorView& b, float eps, int64_t T,
                    float* y) {
  const int64_t C = w.numel();
  VLM_CHECK(T >= 0 && C > 0, "layer_norm T={} C={}", T, C);
  for (int64_t t = 0; t < T; ++t) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < C; ++i) mean += x[t * C + i];
    mean /= static_cast<double>(C);
    for (int64_t i = 0; i < C; ++i) var += (x[t * C + i] - mean) * (x[t * C + i] - mean);
    var /= static_cast<double>(C);
    for (int64_t i = 0; i < C; ++i) {
      const double n = (x[t * C + i] - mean) / std::sqrt(var + eps);
      y[t * C + i] = static_cast<float>(n * load_as_f32(w.data, w.dtype, i) + load_as_f32(b.data, b.dtype, i));
    }
  }
}

void gelu_erf(float* x, int64_t n) {
  VLM_CHECK(n >= 0, "gelu n={}", n);
  for_chunks(n, kMinElemsPerTask, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] = x[i] * 0.5f * (1.0f + std::erf(x[i] * 0.70710678118654752440f));
  });
}

void gelu_erf_ref(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    x[i] = static_cast<float>(v * 0.5 * (1.0 + std::erf(v / std::sqrt(2.0))));
  }
}

void gelu_tanh(float* x, int64_t n) {
  VLM_CHECK(n >= 0, "gelu_tanh n={}", n);
  constexpr float k = 0.79788456080286535588f;  // sqrt(2 / pi)
  for_chunks(n, kMinElemsPerTask, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float v = x[i];
      x[i] = 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
    }
  });
}

void gelu_tanh_ref(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    x[i] = static_cast<float>(0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))));
  }
}

void bilinear_resize(const float* in, int64_t H, int64_t W, int64_t C, int64_t oh, int64_t ow, float* out) {
  VLM_CHECK(H > 0 && W > 0 && C > 0 && oh > 0 && ow > 0, "bilinear {}x{}x{} -> {}x{}", H, W, C, oh, ow);
  struct Tap {
    int64_t i0, i1;
    float l0, l1;
  };
  auto taps = [](int64_t in_size, int64_t out_size) {
    const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
    std::vector<Tap> t(static_cast<size_t>(out_size));
    for (int64_t d = 0; d < out_size; ++d) {
      float src = scale * (static_cast<float>(d) + 0.5f) - 0.5f;
      if (src < 0) src = 0;
      const auto i0 = static_cast<int64_t>(src);
      const float l1 = src - static_cast<float>(i0);
      t[d] = {i0, i0 + (i0 < in_size - 1 ? 1 : 0), 1.0f - l1, l1};
    }
    return t;
  };
  const std::vector<Tap> ty = taps(H, oh), tx = taps(W, ow);
  for (int64_t y = 0; y < oh; ++y)
    for (int64_t x = 0; x < ow; ++x) {
      const Tap& a = ty[y];
      const Tap& b = tx[x];
      const float* p00 = in + (a.i0 * W + b.i0) * C;
      const float* p01 = in + (a.i0 * W + b.i1) * C;
      const float* p10 = in + (a.i1 * W + b.i0) * C;
      const float* p11 = in + (a.i1 * W + b.i1) * C;
      float* o = out + (y * ow + x) * C;
      for (int64_t c = 0; c < C; ++c)
        o[c] = a.l0 * (b.l0 * p00[c] + b.l1 * p01[c]) + a.l1 * (b.l0 * p10[c] + b.l1 * p11[c]);
    }
}

void quick_gelu(float* x, int64_t n) {
  VLM_CHECK(n >= 0, "quick_gelu n={}", n);
  for_chunks(n, kMinElemsPerTask, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] = x[i] / (1.0f + std::exp(-1.702f * x[i]));
  });
}

void quick_gelu_ref(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    x[i] = static_cast<float>(v / (1.0 + std::exp(-1.702 * v)));
  }
}

}  // namespace vlm
