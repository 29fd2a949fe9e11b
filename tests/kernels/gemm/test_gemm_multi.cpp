// linear_multi (kernels/gemm/gemm.h): several products of one x in one pool job give, per
// target, exactly what linear() gives for it alone (same path, same per-output arithmetic), on
// the small-M path, the bf16 dot-product path and the fallback (mixed dtypes or K); and linear()
// itself is checked against linear_ref in test_gemm.cpp.
#include <gtest/gtest.h>

#include <initializer_list>
#include <random>
#include <utility>
#include <vector>

#include "kernels/core/cpu_features.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_internal.h"

namespace vlm {
namespace {

struct Weight {
  Tensor W;
  std::vector<float> bias;
};

Weight random_weight(int64_t N, int64_t K, DType dt, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(N * K));
  for (float& v : w) v = u(rng);
  Weight r{Tensor::empty({N, K}, dt), std::vector<float>(static_cast<size_t>(N))};
  convert_from_f32(w.data(), dt, r.W.data(), N * K);
  for (float& v : r.bias) v = u(rng);
  return r;
}

// Weights of shapes {N, K} (Tensor is move-only, so no initializer list of Weight).
std::vector<Weight> weights(std::initializer_list<std::pair<int64_t, int64_t>> shapes, DType dt, uint32_t seed) {
  std::vector<Weight> ws;
  for (const auto& [N, K] : shapes) ws.push_back(random_weight(N, K, dt, seed++));
  return ws;
}

// Runs linear_multi over `ws` (every other one with a bias) and compares each output with
// linear() on that weight alone, bit for bit.
void check_multi_equals_single(int64_t M, const std::vector<Weight>& ws, int64_t K_x) {
  std::mt19937 rng(static_cast<uint32_t>(M * 31 + ws.size()));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(M * K_x));
  for (float& v : x) v = u(rng);
  std::vector<TensorView> views;
  for (const Weight& w : ws) views.push_back(w.W.view());
  std::vector<std::vector<float>> multi(ws.size()), single(ws.size());
  std::vector<LinearTarget> targets;
  for (size_t i = 0; i < ws.size(); ++i) {
    const int64_t N = views[i].dim(0);
    multi[i].assign(static_cast<size_t>(M * N), -1.0f);
    single[i].assign(static_cast<size_t>(M * N), -2.0f);
    targets.push_back({&views[i], i % 2 ? ws[i].bias.data() : nullptr, multi[i].data()});
  }
  linear_multi(x.data(), M, targets);
  for (size_t i = 0; i < ws.size(); ++i) {
    linear(x.data(), M, views[i], targets[i].bias, single[i].data());
    ASSERT_EQ(multi[i], single[i]) << "target " << i << " M " << M;
  }
}

TEST(GemmMulti, QkvAndGateUpShapesEqualSeparateProducts) {
  const bool old = bf16_activations();
  for (bool bf16 : {false, true}) {
    if (bf16 && !gemm_detail::bf16_dot_supported()) continue;
    set_bf16_activations(bf16);
    for (DType dt : {DType::BF16, DType::F32, DType::F16}) {
      const int64_t K = 72;
      // q/k/v-like (N 96, 24, 24) and gate/up-like (N 200, 200), odd sizes to hit the tails.
      const std::vector<Weight> qkv = weights({{96, K}, {24, K}, {24, K}}, dt, 1);
      const std::vector<Weight> gate_up = weights({{200, K}, {200, K}}, dt, 4);
      for (int64_t M : {1, 3, 8, 16, 33, 200}) {
        check_multi_equals_single(M, qkv, K);
        check_multi_equals_single(M, gate_up, K);
      }
    }
  }
  set_bf16_activations(old);
}

TEST(GemmMulti, MixedDtypesFallBackToOneProductEach) {
  const int64_t K = 40;
  std::vector<Weight> ws = weights({{32, K}}, DType::BF16, 6);
  ws.push_back(random_weight(16, K, DType::F32, 7));
  for (int64_t M : {1, 20}) check_multi_equals_single(M, ws, K);
}

TEST(GemmMulti, PortableSmallMPathToo) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "the default path is already portable";
  set_avx512_enabled(false);
  const std::vector<Weight> ws = weights({{40, 50}, {8, 50}}, DType::BF16, 8);
  for (int64_t M : {1, 2}) check_multi_equals_single(M, ws, 50);
  set_avx512_enabled(true);
}

}  // namespace
}  // namespace vlm
