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

TEST(GemmMulti, ManyTasksEqualSeparateProducts) {
  // Several guided tasks per W (task bounds differ between the joint job and the single ones).
  const bool old = bf16_activations();
  for (bool bf16 : {false, true}) {
    if (bf16 && !gemm_detail::bf16_dot_supported()) continue;
    set_bf16_activations(bf16);
    const int64_t K = 64;
    const std::vector<Weight> ws = weights({{5000, K}, {3000, K}}, DType::BF16, 9);
    for (int64_t M : {1, 4, 16}) check_multi_equals_single(M, ws, K);
  }
  set_bf16_activations(old);
}

// plan_row_tasks: every row of every target in exactly one task, in order; tasks of whole
// multiples of 8 rows (but a target's last), within [min_rows, rows_per_task] (but a target's
// last), shrinking toward the end of the job.
TEST(GemmRowTasks, GuidedTasksCoverEveryRowOnceAndShrink) {
  for (int threads : {1, 2, 4}) {
    for (const std::vector<std::pair<int64_t, int64_t>>& shapes :
         std::vector<std::vector<std::pair<int64_t, int64_t>>>{{{151936, 896}}, {{4864, 896}, {4864, 896}},
                                                                {{896, 896}, {128, 896}, {128, 896}}, {{896, 4864}},
                                                                {{1001, 64}, {13, 64}}}) {
      std::vector<TensorView> views;
      std::vector<LinearTarget> targets;
      std::vector<gemm_detail::RowSplit> splits;
      views.reserve(shapes.size());
      for (const auto& [N, K] : shapes) {
        views.push_back(TensorView(nullptr, DType::BF16, Shape{N, K}));
        splits.push_back(gemm_detail::plan_row_split(N, K, 2, 65536, 4, threads));
      }
      for (const TensorView& v : views) targets.push_back({&v, nullptr, nullptr});
      std::vector<gemm_detail::RowTask> tasks;
      gemm_detail::plan_row_tasks(targets, splits.data(), threads, tasks);
      size_t i = 0;
      for (size_t t = 0; t < targets.size(); ++t) {
        const int64_t N = shapes[t].first;
        const gemm_detail::RowSplit& p = splits[t];
        int64_t next = 0, prev_rows = p.rows_per_task;
        for (; i < tasks.size() && tasks[i].target == static_cast<int64_t>(t); ++i) {
          const gemm_detail::RowTask& task = tasks[i];
          ASSERT_EQ(task.n0, next);
          ASSERT_GT(task.n1, task.n0);
          const int64_t rows = task.n1 - task.n0;
          next = task.n1;
          if (task.n1 == N) break;  // a target's last task: what is left
          EXPECT_EQ(rows % 8, 0);
          EXPECT_LE(rows, p.rows_per_task);
          EXPECT_GE(rows, std::min(p.min_rows, p.rows_per_task));
          EXPECT_LE(rows, prev_rows);
          prev_rows = rows;
        }
        ASSERT_LT(i, tasks.size());
        EXPECT_EQ(tasks[i].n1, N) << "target " << t;
        ++i;
      }
      EXPECT_EQ(i, tasks.size());
      if (shapes[0].first == 151936 && threads == 2) {
        // The LM head: the last tasks are the smallest (~128 KB of W), not an eighth of it.
        EXPECT_LE(tasks.back().n1 - tasks.back().n0, splits[0].min_rows);
        EXPECT_LE(tasks.size(), 64u);
      }
    }
  }
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
