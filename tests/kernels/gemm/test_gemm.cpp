// linear() and both of its paths against linear_ref (double accumulation) over a table of
// shapes, every W dtype, with and without bias; plus the preconditions.
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

constexpr int64_t kGuard = 19;       // canary floats on each side of y
constexpr float kCanary = -7777.0f;
// Per row: max_n |y - ref| <= kTolerance * max_n scale_n, scale_n = sum_k |x_k W_nk| + |bias_n|.
// f32 accumulation error is bounded relative to that scale (not to |ref|, which can cancel to
// ~0); a missing or wrong term moves y by ~|x_k W_nk|, far above 1e-5 of the scale for K<=1000.
constexpr double kTolerance = 1e-5;

struct Problem {
  int64_t M, K, N;
  DType dt;
  bool with_bias;
  std::vector<float> x;      // [M,K]
  Tensor W;                  // [N,K] in dt
  std::vector<float> bias;   // [N]
  std::vector<float> ref;    // [M,N]
  std::vector<double> scale; // [M,N] sum_k |x W| + |bias|

  Problem(int64_t m, int64_t k, int64_t n, DType t, bool b) : M(m), K(k), N(n), dt(t), with_bias(b) {
    std::mt19937 rng(static_cast<uint32_t>(m * 1000003 + k * 1009 + n * 7 + int(t) * 3 + b));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    x.resize(M * K);
    for (float& v : x) v = u(rng);
    std::vector<float> w(N * K);
    for (float& v : w) v = u(rng);
    W = Tensor::empty({N, K}, dt);
    convert_from_f32(w.data(), dt, W.data(), N * K);
    bias.resize(N);
    for (float& v : bias) v = u(rng);
    ref.resize(M * N);
    linear_ref(x.data(), M, W.view(), bias_ptr(), ref.data());
    scale.assign(M * N, 0.0);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = b ? std::fabs(bias[j]) : 0.0;
        for (int64_t l = 0; l < K; ++l)
          s += std::fabs(double(x[i * K + l]) * load_as_f32(W.data(), dt, j * K + l));
        scale[i * N + j] = s;
      }
  }
  const float* bias_ptr() const { return with_bias ? bias.data() : nullptr; }
  std::string name() const {
    return "M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N) +
           " W=" + dtype_name(dt) + (with_bias ? " bias" : "");
  }
};

using Fn = void (*)(const float*, int64_t, const TensorView&, const float*, float*);

// Runs fn into a guarded y and checks every row against the reference.
void check_against_ref(const Problem& p, Fn fn) {
  std::vector<float> buf(p.M * p.N + 2 * kGuard, kCanary);
  float* y = buf.data() + kGuard;
  fn(p.x.data(), p.M, p.W.view(), p.bias_ptr(), y);
  for (int64_t m = 0; m < p.M; ++m) {
    double max_err = 0, max_scale = 0;
    for (int64_t n = 0; n < p.N; ++n) {
      const double r = p.ref[m * p.N + n], v = y[m * p.N + n];
      max_err = std::max(max_err, std::isfinite(v) ? std::fabs(v - r) : INFINITY);
      max_scale = std::max(max_scale, p.scale[m * p.N + n]);
    }
    ASSERT_LE(max_err, kTolerance * max_scale) << p.name() << " row " << m;
  }
  for (int64_t i = 0; i < kGuard; ++i) {
    ASSERT_EQ(buf[i], kCanary) << p.name() << ": wrote before y";
    ASSERT_EQ(buf[kGuard + p.M * p.N + i], kCanary) << p.name() << ": wrote past y";
  }
}

const int64_t kMs[] = {1, 2, 3, 4, 5, 7, 17, 64, 130};
const std::pair<int64_t, int64_t> kKNs[] = {
    {1, 1},     {1, 17},     {3, 3},     {17, 1},   {17, 64},   {64, 17},    {64, 64},
    {129, 257}, {257, 129},  {1000, 3},  {3, 1000}, {257, 1000}, {1000, 129}};

// The table (built once: the double reference dominates the test time).
const std::vector<Problem>& problems() {
  static const std::vector<Problem> all = [] {
    std::vector<Problem> v;
    for (int64_t M : kMs)
      for (auto [K, N] : kKNs)
        for (DType dt : {DType::F32, DType::BF16, DType::F16})
          for (bool b : {false, true}) v.emplace_back(M, K, N, dt, b);
    return v;
  }();
  return all;
}

template <typename Body>
void for_each_problem(Body body) {
  for (const Problem& p : problems()) {
    body(p);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Sets the bf16-activation switch for a scope (kernels/gemm/gemm.h).
struct Bf16ActivationsScope {
  bool old = bf16_activations();
  explicit Bf16ActivationsScope(bool on) { set_bf16_activations(on); }
  ~Bf16ActivationsScope() { set_bf16_activations(old); }
};

// The exact paths (f32 activations, the default); the bf16 dot-product path has its own tests
// (test_gemm_bf16.cpp).
TEST(Gemm, LinearMatchesReference) {
  EXPECT_FALSE(bf16_activations());  // the default
  Bf16ActivationsScope exact(false);
  for_each_problem([](const Problem& p) { check_against_ref(p, linear); });
}

TEST(Gemm, LinearWithoutAvx512MatchesReference) {
  set_avx512_enabled(false);  // also switches the bf16 dot-product path off
  for_each_problem([](const Problem& p) { check_against_ref(p, linear); });
  set_avx512_enabled(true);
}

template <int64_t kGroup>
void small_m_with_group(const float* x, int64_t M, const TensorView& W, const float* b, float* y) {
  gemm_detail::linear_small_m(x, M, W, b, y, kGroup);
}

TEST(Gemm, SmallMPathMatchesReferenceAtEveryMAndRowGroup) {
  for (Fn fn : {small_m_with_group<0>, small_m_with_group<1>, small_m_with_group<2>,
                small_m_with_group<3>, small_m_with_group<5>, small_m_with_group<6>,
                small_m_with_group<7>, small_m_with_group<8>})
    for_each_problem([fn](const Problem& p) { check_against_ref(p, fn); });
}

TEST(Gemm, SmallMPortablePathMatchesReference) {
  set_avx512_enabled(false);
  for (Fn fn : {small_m_with_group<0>, small_m_with_group<8>})
    for_each_problem([fn](const Problem& p) { check_against_ref(p, fn); });
  set_avx512_enabled(true);
}

TEST(Gemm, BlasPathMatchesReferenceAtEveryM) {
  for_each_problem([](const Problem& p) {
    check_against_ref(p, [](const float* x, int64_t M, const TensorView& W, const float* b,
                            float* y) { gemm_detail::linear_blas(x, M, W, b, y); });
  });
}

TEST(Gemm, BlasPathWithSmallOddPanels) {
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    Problem p(9, 33, 100, dt, true);
    check_against_ref(p, [](const float* x, int64_t M, const TensorView& W, const float* b,
                            float* y) { gemm_detail::linear_blas(x, M, W, b, y, 7); });
  }
}

TEST(Gemm, ThreadCounts) {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int threads : {1, 3}) {
    set_num_threads(threads);
    Bf16ActivationsScope exact(false);
    for (int64_t M : {1, 4, 17, 40})
      for (DType dt : {DType::F32, DType::BF16}) check_against_ref(Problem(M, 129, 257, dt, true), linear);
  }
  set_num_threads(hw);
}

TEST(Gemm, EmptyAndDegenerateShapes) {
  Tensor W = Tensor::zeros({5, 0}, DType::BF16);
  std::vector<float> bias = {1, 2, 3, 4, 5}, y(10, kCanary);
  linear(nullptr, 2, W.view(), bias.data(), y.data());  // K = 0: y = bias
  for (int m = 0; m < 2; ++m)
    for (int n = 0; n < 5; ++n) EXPECT_EQ(y[m * 5 + n], bias[n]);
  linear(nullptr, 2, W.view(), nullptr, y.data());
  for (float v : y) EXPECT_EQ(v, 0.0f);
  Tensor W2 = Tensor::zeros({4, 3}, DType::F32);
  linear(nullptr, 0, W2.view(), nullptr, nullptr);  // M = 0: no-op
}

TEST(Gemm, RejectsBadArguments) {
  std::vector<float> x(64, 1.0f), y(64);
  Tensor w1 = Tensor::zeros({16}, DType::F32);
  EXPECT_THROW(linear(x.data(), 1, w1.view(), nullptr, y.data()), InternalError);
  Tensor wi = Tensor::zeros({4, 4}, DType::I32);
  EXPECT_THROW(linear(x.data(), 1, wi.view(), nullptr, y.data()), InternalError);
  EXPECT_THROW(linear_ref(x.data(), 1, wi.view(), nullptr, y.data()), InternalError);
  Tensor w = Tensor::zeros({4, 4}, DType::BF16);
  EXPECT_THROW(linear(x.data(), -1, w.view(), nullptr, y.data()), InternalError);
  EXPECT_THROW(linear(x.data(), 2, w.view(), nullptr, x.data() + 4), InternalError);  // alias
  EXPECT_NO_THROW(linear(x.data(), 2, w.view(), nullptr, x.data() + 8));  // adjacent is fine
}

TEST(Gemm, SmallMKernelPropagatesNaNAndInf) {
  Problem p(2, 40, 20, DType::BF16, false);
  std::vector<float> x = p.x, y(p.M * p.N);
  x[5] = NAN;  // row 0 only
  linear(x.data(), p.M, p.W.view(), nullptr, y.data());
  for (int64_t n = 0; n < p.N; ++n) {
    EXPECT_TRUE(std::isnan(y[n])) << n;
    EXPECT_FALSE(std::isnan(y[p.N + n])) << n;
  }
}

}  // namespace
}  // namespace vlm
