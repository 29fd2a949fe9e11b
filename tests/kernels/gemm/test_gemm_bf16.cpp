// The bf16 dot-product path of linear() (kernels/gemm/gemm_bf16.cpp) against its naive reference
// (bf16-rounded x, double accumulation) over a table of shapes, and against the exact f32
// reference (linear_ref) with the error bound that rounding x to bf16 allows; plus which path
// linear() takes and the switch back to the exact path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/core/cpu_features.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_internal.h"
#include "kernels/core/thread_pool.h"

namespace vlm {
namespace {

constexpr int64_t kGuard = 17;
constexpr float kCanary = -5555.0f;

struct Case {
  int64_t M, K, N;
  bool with_bias;
  std::vector<float> x;     // [M,K]
  Tensor W;                 // [N,K] BF16
  std::vector<float> bias;  // [N]
  std::vector<double> scale;  // [M,N] sum_k |x_k W_nk| + |bias_n|

  Case(int64_t m, int64_t k, int64_t n, bool b) : M(m), K(k), N(n), with_bias(b) {
    std::mt19937 rng(static_cast<uint32_t>(m * 7919 + k * 131 + n * 3 + b));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    x.resize(M * K);
    for (float& v : x) v = u(rng);
    std::vector<float> w(N * K);
    for (float& v : w) v = u(rng);
    W = Tensor::empty({N, K}, DType::BF16);
    convert_from_f32(w.data(), DType::BF16, W.data(), N * K);
    bias.resize(N);
    for (float& v : bias) v = u(rng);
    scale.assign(M * N, 0.0);
    const auto* wb = W.as<uint16_t>();
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = b ? std::fabs(bias[j]) : 0.0;
        for (int64_t l = 0; l < K; ++l) s += std::fabs(double(x[i * K + l]) * bf16_to_f32(wb[j * K + l]));
        scale[i * N + j] = s;
      }
  }
  const float* bias_ptr() const { return with_bias ? bias.data() : nullptr; }
  std::string name() const {
    return "M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N) +
           (with_bias ? " bias" : "");
  }
};

// Runs fn into a guarded y; checks max_n |y - ref| <= tol * max_n scale per row and the guards.
template <typename Fn>
void check(const Case& c, const std::vector<float>& ref, double tol, Fn fn) {
  std::vector<float> buf(c.M * c.N + 2 * kGuard, kCanary);
  float* y = buf.data() + kGuard;
  fn(c.x.data(), c.M, c.W.view(), c.bias_ptr(), y);
  for (int64_t m = 0; m < c.M; ++m) {
    double max_err = 0, max_scale = 0;
    for (int64_t n = 0; n < c.N; ++n) {
      const double r = ref[m * c.N + n], v = y[m * c.N + n];
      max_err = std::max(max_err, std::isfinite(v) ? std::fabs(v - r) : INFINITY);
      max_scale = std::max(max_scale, c.scale[m * c.N + n]);
    }
    ASSERT_LE(max_err, tol * max_scale) << c.name() << " row " << m;
  }
  for (int64_t i = 0; i < kGuard; ++i) {
    ASSERT_EQ(buf[i], kCanary) << c.name() << ": wrote before y";
    ASSERT_EQ(buf[kGuard + c.M * c.N + i], kCanary) << c.name() << ": wrote past y";
  }
}

// Shapes around the kernel's tile sizes: 12 rows, 32 columns (two halves of 16), 16 pairs of
// K per transpose, odd K (a half-empty last pair), N and M tails.
const int64_t kMs[] = {1, 11, 12, 13, 40, 97};
const std::pair<int64_t, int64_t> kKNs[] = {{1, 1},   {2, 16},   {31, 33},  {32, 32}, {33, 17},
                                            {64, 48}, {65, 100}, {130, 64}, {257, 70}, {96, 300}};

bool skip_without_bf16() { return !gemm_detail::bf16_dot_supported(); }

// bf16 path vs its reference: the same products exactly (bf16 x bf16 is exact in f32), only the
// f32 summation order differs: 1e-5 of the row scale, as for the f32 paths.
TEST(GemmBf16, DotPathMatchesItsReference) {
  if (skip_without_bf16()) GTEST_SKIP() << "no AVX512-BF16";
  for (int64_t M : kMs)
    for (auto [K, N] : kKNs)
      for (bool b : {false, true}) {
        Case c(M, K, N, b);
        std::vector<float> ref(M * N);
        gemm_detail::linear_bf16_ref(c.x.data(), M, c.W.view(), c.bias_ptr(), ref.data());
        for (int64_t chunk : {int64_t{0}, int64_t{16}})  // one K chunk / chunks of 16 pairs
          check(c, ref, 1e-5, [chunk](const float* x, int64_t m, const TensorView& w,
                                      const float* bias, float* y) {
            gemm_detail::linear_bf16_dot(x, m, w, bias, y, chunk);
          });
        if (HasFatalFailure()) return;
      }
}

// Against the exact f32 product: rounding x to bf16 (8 significant bits) changes each x_k by at
// most 2^-8 |x_k|, so |y - y_f32| <= 2^-8 * sum_k |x_k W_nk| (+ f32 summation, 1e-5).
TEST(GemmBf16, DotPathErrorAgainstExactF32IsBounded) {
  if (skip_without_bf16()) GTEST_SKIP() << "no AVX512-BF16";
  for (auto [K, N] : kKNs) {
    Case c(40, K, N, true);
    std::vector<float> ref(c.M * N);
    linear_ref(c.x.data(), c.M, c.W.view(), c.bias_ptr(), ref.data());
    check(c, ref, 1.0 / 256 + 1e-5, [](const float* x, int64_t m, const TensorView& w,
                                       const float* bias, float* y) {
      gemm_detail::linear_bf16_dot(x, m, w, bias, y);
    });
    if (HasFatalFailure()) return;
  }
}

// The bf16 GEMV path (kernels/gemm/gemv_bf16.cpp) against the same reference: M across its row
// groups of 4 (1..9), N across its blocks of 8 and 4 rows with tails, K with and without a tail
// of 32, and a block-sized N so that several L2 blocks and pool tasks (and the prefetch of the
// next block past the task's end) are exercised.
TEST(GemmBf16, GemvPathMatchesItsReference) {
  if (skip_without_bf16()) GTEST_SKIP() << "no AVX512-BF16";
  const std::pair<int64_t, int64_t> kns[] = {{1, 1},  {31, 33}, {32, 32},  {33, 17},  {64, 9},
                                             {65, 100}, {896, 13}, {130, 300}, {96, 1500}};
  for (int64_t M : {1, 2, 3, 4, 5, 8, 9, 15})
    for (auto [K, N] : kns)
      for (bool b : {false, true}) {
        if (M > 5 && N > 300) continue;  // the reference is slow; the large N runs for M <= 5
        Case c(M, K, N, b);
        std::vector<float> ref(M * N);
        gemm_detail::linear_bf16_ref(c.x.data(), M, c.W.view(), c.bias_ptr(), ref.data());
        check(c, ref, 1e-5, gemm_detail::linear_gemv_bf16);
        if (HasFatalFailure()) return;
      }
}

// q/k/v-shaped targets of one x in one call give what one call each gives.
TEST(GemmBf16, GemvMultiMatchesSingleCalls) {
  if (skip_without_bf16()) GTEST_SKIP() << "no AVX512-BF16";
  Case q(3, 96, 64, true), k(3, 96, 16, true), v(3, 96, 24, false), extra(3, 96, 40, true);
  std::vector<float> yq(3 * 64), yk(3 * 16), yv(3 * 24), ye(3 * 40);
  const TensorView wq = q.W.view(), wk = k.W.view(), wv = v.W.view(), we = extra.W.view();
  const LinearTarget t[] = {{&wq, q.bias_ptr(), yq.data()}, {&wk, k.bias_ptr(), yk.data()},
                            {&wv, nullptr, yv.data()}, {&we, extra.bias_ptr(), ye.data()}};
  gemm_detail::linear_gemv_bf16_multi(q.x.data(), 3, t);
  for (const auto& [c, y] : {std::pair{&q, &yq}, {&k, &yk}, {&v, &yv}, {&extra, &ye}}) {
    std::vector<float> one(y->size());
    const float* bias = c == &v ? nullptr : c->bias_ptr();
    gemm_detail::linear_gemv_bf16(q.x.data(), 3, c->W.view(), bias, one.data());
    EXPECT_EQ(*y, one);
  }
  std::vector<float> yq2(yq.size());  // five targets: more than the kernel keeps inline
  const LinearTarget t5[] = {t[0], t[1], t[2], t[3], {&wq, nullptr, yq2.data()}};
  gemm_detail::linear_gemv_bf16_multi(q.x.data(), 3, t5);
  std::vector<float> no_bias(yq.size());
  gemm_detail::linear_gemv_bf16(q.x.data(), 3, wq, nullptr, no_bias.data());
  EXPECT_EQ(yq2, no_bias);
}

// Against the exact f32 product, the same bound as the dot-product path (x rounded to bf16).
TEST(GemmBf16, GemvPathErrorAgainstExactF32IsBounded) {
  if (skip_without_bf16()) GTEST_SKIP() << "no AVX512-BF16";
  Case c(1, 896, 200, true);
  std::vector<float> ref(c.N);
  linear_ref(c.x.data(), 1, c.W.view(), c.bias_ptr(), ref.data());
  check(c, ref, 1.0 / 256 + 1e-5, gemm_detail::linear_gemv_bf16);
}

// linear() takes the bf16 path for BF16 W from kBf16DotMinM rows on when switched on (off by
// default), not without AVX-512; otherwise it is exact.
TEST(GemmBf16, LinearChoosesThePathAndCanBeSwitchedOff) {
  const int64_t M = kBf16DotMinM + 3;
  EXPECT_FALSE(bf16_activations());  // the default: exact
  EXPECT_FALSE(uses_bf16_dot(DType::BF16, M));
  set_bf16_activations(true);
  Case c(M, 100, 70, true);
  std::vector<float> ref_bf16(M * c.N), ref_f32(M * c.N);
  linear_ref(c.x.data(), M, c.W.view(), c.bias_ptr(), ref_f32.data());
  EXPECT_FALSE(uses_bf16_dot(DType::F32, M));
  EXPECT_FALSE(uses_bf16_dot(DType::F16, M));
  EXPECT_FALSE(uses_bf16_dot(DType::BF16, kBf16DotMinM - 1));
  EXPECT_FALSE(uses_bf16_gemv(DType::F32, 1));
  EXPECT_FALSE(uses_bf16_gemv(DType::BF16, M));
  if (!skip_without_bf16()) {
    EXPECT_TRUE(uses_bf16_dot(DType::BF16, M));
    EXPECT_TRUE(uses_bf16_gemv(DType::BF16, 1));
    EXPECT_TRUE(uses_bf16_gemv(DType::BF16, kBf16DotMinM - 1));
    Case one(1, 100, 70, true);  // decode: the GEMV path, the same rounding of x
    std::vector<float> ref1(one.N);
    gemm_detail::linear_bf16_ref(one.x.data(), 1, one.W.view(), one.bias_ptr(), ref1.data());
    check(one, ref1, 1e-5, linear);
    gemm_detail::linear_bf16_ref(c.x.data(), M, c.W.view(), c.bias_ptr(), ref_bf16.data());
    check(c, ref_bf16, 1e-5, linear);
    // The rounding is visible: the exact tolerance fails on the bf16 path for this case.
    std::vector<float> y(M * c.N);
    linear(c.x.data(), M, c.W.view(), c.bias_ptr(), y.data());
    double max_err = 0;
    for (int64_t i = 0; i < M * c.N; ++i) max_err = std::max(max_err, std::fabs(double(y[i]) - ref_f32[i]));
    EXPECT_GT(max_err, 1e-4);
  }
  set_avx512_enabled(false);  // the fallback on a CPU without AVX-512 (and so without BF16)
  EXPECT_FALSE(uses_bf16_dot(DType::BF16, M));
  EXPECT_FALSE(uses_bf16_gemv(DType::BF16, 1));
  check(c, ref_f32, 1e-5, linear);
  set_avx512_enabled(true);
  set_bf16_activations(false);
  EXPECT_FALSE(uses_bf16_dot(DType::BF16, M));
  EXPECT_FALSE(uses_bf16_gemv(DType::BF16, 1));
  check(c, ref_f32, 1e-5, linear);
}

TEST(GemmBf16, ThreadCounts) {
  if (skip_without_bf16()) GTEST_SKIP() << "no AVX512-BF16";
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  Case c(50, 129, 257, true);
  std::vector<float> ref(c.M * c.N);
  gemm_detail::linear_bf16_ref(c.x.data(), c.M, c.W.view(), c.bias_ptr(), ref.data());
  for (int threads : {1, 3, 5}) {
    set_num_threads(threads);
    check(c, ref, 1e-5, [](const float* x, int64_t m, const TensorView& w, const float* bias,
                           float* y) { gemm_detail::linear_bf16_dot(x, m, w, bias, y); });
  }
  set_num_threads(hw);
}

TEST(GemmBf16, PropagatesNaN) {
  if (skip_without_bf16()) GTEST_SKIP() << "no AVX512-BF16";
  Case c(40, 40, 20, false);
  std::vector<float> x = c.x, y(c.M * c.N);
  x[5] = NAN;  // row 0 only
  gemm_detail::linear_bf16_dot(x.data(), c.M, c.W.view(), nullptr, y.data());
  for (int64_t n = 0; n < c.N; ++n) {
    EXPECT_TRUE(std::isnan(y[n])) << n;
    EXPECT_FALSE(std::isnan(y[c.N + n])) << n;
  }
}

}  // namespace
}  // namespace vlm
