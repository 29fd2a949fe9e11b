// Vision-tower kernels against their naive references over a table of shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/attention/dense_attention.h"
#include "kernels/core/dtype.h"
#include "kernels/core/tensor.h"
#include "kernels/ops/vision_ops.h"

namespace vlm {
namespace {

std::vector<float> randn(size_t n, float scale, uint32_t seed, float shift = 0) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g) + shift;
  return v;
}

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / (1.0 + std::abs(b[i])));
  return worst;
}

TEST(VisionOps, LayerNormMatchesRef) {
  for (auto [T, C] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {577, 32}, {64, 1024}, {2000, 48}}) {
    for (DType wt : {DType::F32, DType::BF16}) {
      std::vector<float> x = randn(static_cast<size_t>(T * C), 3.0f, 1, 5.0f);  // offset mean
      std::vector<float> wf = randn(static_cast<size_t>(C), 0.3f, 2, 1.0f), bf = randn(static_cast<size_t>(C), 0.2f, 3);
      std::vector<uint16_t> w16(static_cast<size_t>(C)), b16(static_cast<size_t>(C));
      TensorView w(wf.data(), DType::F32, {C}), b(bf.data(), DType::F32, {C});
      if (wt == DType::BF16) {
        convert_from_f32(wf.data(), DType::BF16, w16.data(), C);
        convert_from_f32(bf.data(), DType::BF16, b16.data(), C);
        w = TensorView(w16.data(), DType::BF16, {C});
        b = TensorView(b16.data(), DType::BF16, {C});
      }
      std::vector<float> y(x.size()), yr(x.size());
      layer_norm(x.data(), w, b, 1e-5f, T, y.data());
      layer_norm_ref(x.data(), w, b, 1e-5f, T, yr.data());
      EXPECT_LE(max_rel(y, yr), 2e-6) << T << "x" << C;
      layer_norm(x.data(), w, b, 1e-5f, T, x.data());  // in place
      EXPECT_EQ(x, y);
    }
  }
}

TEST(VisionOps, ActivationsMatchRef) {
  for (int64_t n : {1, 17, 40000, 100003}) {
    const std::vector<float> x = randn(static_cast<size_t>(n), 4.0f, 9);
    std::vector<float> a = x, ar = x, q = x, qr = x, t = x, tr = x;
    gelu_erf(a.data(), n);
    gelu_erf_ref(ar.data(), n);
    gelu_tanh(t.data(), n);
    gelu_tanh_ref(tr.data(), n);
    EXPECT_LE(max_rel(t, tr), 2e-6) << n;
    quick_gelu(q.data(), n);
    quick_gelu_ref(qr.data(), n);
    EXPECT_LE(max_rel(a, ar), 1e-6) << n;
    EXPECT_LE(max_rel(q, qr), 1e-6) << n;
  }
  float v[3] = {0.0f, 1.0f, -1.0f};
  gelu_erf(v, 3);
  EXPECT_FLOAT_EQ(v[0], 0.0f);
  EXPECT_NEAR(v[1], 0.8413447f, 1e-6);
  EXPECT_NEAR(v[2], -0.1586553f, 1e-6);
  float w[2] = {1.0f, -1.0f};  // torch.nn.functional.gelu(x, approximate="tanh")
  gelu_tanh(w, 2);
  EXPECT_NEAR(w[0], 0.8411920f, 1e-6);
  EXPECT_NEAR(w[1], -0.1588080f, 1e-6);
}

TEST(DenseAttention, MatchesRef) {
  struct S { int64_t N, L; int H, D; };
  for (S s : {S{1, 1, 1, 1}, S{1, 5, 2, 8}, S{3, 17, 2, 16}, S{2, 50, 4, 64}, S{1, 577, 2, 16}}) {
    const size_t n = static_cast<size_t>(s.N * s.L * s.H * s.D);
    const auto q = randn(n, 1.0f, 1), k = randn(n, 1.0f, 2), v = randn(n, 1.0f, 3);
    std::vector<float> out(n), ref(n);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
    dense_attention(q.data(), k.data(), v.data(), s.N, s.L, s.H, s.D, scale, out.data());
    dense_attention_ref(q.data(), k.data(), v.data(), s.N, s.L, s.H, s.D, scale, ref.data());
    EXPECT_LE(max_rel(out, ref), 1e-5) << s.N << " " << s.L << " " << s.H << " " << s.D;
  }
  // Sequences are independent: changing sequence 1 leaves sequence 0's output alone.
  const int64_t N = 2, L = 9;
  const int H = 2, D = 4;
  const size_t n = static_cast<size_t>(N * L * H * D);
  auto q = randn(n, 1.0f, 4), k = randn(n, 1.0f, 5), v = randn(n, 1.0f, 6);
  std::vector<float> a(n), b(n);
  dense_attention(q.data(), k.data(), v.data(), N, L, H, D, 0.5f, a.data());
  for (size_t i = n / 2; i < n; ++i) k[i] += 1.0f, v[i] -= 2.0f;
  dense_attention(q.data(), k.data(), v.data(), N, L, H, D, 0.5f, b.data());
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + n / 2, b.begin()));
  EXPECT_FALSE(std::equal(a.begin() + n / 2, a.end(), b.begin() + n / 2));
}

}  // namespace
}  // namespace vlm
