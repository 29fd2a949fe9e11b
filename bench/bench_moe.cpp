// The CPU mixture-of-experts block (CpuLayers::moe, model/layers/cpu/cpu_moe.h) on one layer of
// Qwen3-30B-A3B's shape (C 2048, 128 experts of I 768, top 8, renormalised; random bf16 weights,
// 1.2 GB), T tokens per call:
//  - grouped/T: the layer as built (tokens grouped by expert: one gate|up and one down product per
//    chosen expert over its tokens);
//  - per_token/T: the same routing, then one M = 1 product per token per chosen expert (what the
//    grouping avoids: each token re-reads its experts' weights).
// Both on the global thread pool (2 threads). tok/s in the counters.
// Run: build/bin/bench_moe --benchmark_min_time=2   (results: bench/RESULTS.md, "MoE")
#include <benchmark/benchmark.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/core/thread_pool.h"
#include "kernels/gemm/gemm.h"
#include "kernels/ops/ops.h"
#include "model/layers/cpu/cpu_layers.h"
#include "model/layers/cpu/cpu_step.h"

namespace vlm {
namespace {

constexpr int64_t C = 2048, I = 768, E = 128, K = 8;

struct Weights {
  std::vector<uint16_t> router, gate_up, down;  // bf16 [E, C], [E, 2I, C], [E, C, I]
  Weights() {
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.f, 0.03f);
    auto fill = [&](std::vector<uint16_t>& v, int64_t n) {
      v.resize(static_cast<size_t>(n));
      for (auto& x : v) x = f32_to_bf16(nd(rng));
    };
    fill(router, E * C);
    fill(gate_up, E * 2 * I * C);
    fill(down, E * C * I);
  }
  WeightSource source() {
    return WeightSource(
        [this](const std::string& n, const Shape& s) {
          if (n == "gate.weight") return TensorView(router.data(), DType::BF16, s);
          if (n == "experts.gate_up_proj") return TensorView(gate_up.data(), DType::BF16, s);
          if (n == "experts.down_proj") return TensorView(down.data(), DType::BF16, s);
          throw LoadError("no tensor " + n);
        },
        "");
  }
};

Weights& weights() {
  static Weights w;
  return w;
}

MoeSpec spec() {
  MoeSpec s;
  s.hidden = C;
  s.inner = I;
  s.num_experts = E;
  s.top_k = K;
  s.norm_topk_prob = true;
  s.router = {"gate.weight", {E, C}};
  s.experts = "experts.";
  s.layout = ExpertLayout::Fused;
  return s;
}

std::vector<float> input(int64_t T) {
  std::mt19937 rng(static_cast<uint32_t>(T));
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(T * C));
  for (float& v : x) v = nd(rng);
  return x;
}

void grouped(benchmark::State& state) {
  set_num_threads(2);
  const int64_t T = state.range(0);
  CpuLayers backend;
  auto moe = backend.moe(weights().source(), spec());
  ActivationPlan plan;
  plan.bufs.push_back({moe->inner_cols(), ActRole::Hidden, false});
  CpuStep step(plan, T);
  std::vector<float> x = input(T), y(static_cast<size_t>(T * C));
  for (auto _ : state) {
    moe->forward(step, Act{x.data(), T, C, DType::F32}, step.act(0), Act{y.data(), T, C, DType::F32}, Accum::Write);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(T), benchmark::Counter::kIsIterationInvariantRate);
}

void per_token(benchmark::State& state) {
  set_num_threads(2);
  const int64_t T = state.range(0);
  Weights& w = weights();
  const TensorView router(w.router.data(), DType::BF16, Shape{E, C});
  std::vector<TensorView> gate, up, down;
  for (int64_t e = 0; e < E; ++e) {
    gate.emplace_back(w.gate_up.data() + e * 2 * I * C, DType::BF16, Shape{I, C});
    up.emplace_back(w.gate_up.data() + (e * 2 * I + I) * C, DType::BF16, Shape{I, C});
    down.emplace_back(w.down.data() + e * C * I, DType::BF16, Shape{C, I});
  }
  std::vector<float> x = input(T), y(static_cast<size_t>(T * C)), prob(static_cast<size_t>(T * E));
  std::vector<float> g(I), u(I), o(C);
  std::vector<int32_t> order(E);
  for (auto _ : state) {
    linear(x.data(), T, router, nullptr, prob.data());
    softmax_rows(prob.data(), T, E);
    for (int64_t t = 0; t < T; ++t) {
      const float* p = prob.data() + t * E;
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + K, order.end(), [p](int32_t a, int32_t b) { return p[a] > p[b]; });
      float sum = 0;
      for (int64_t j = 0; j < K; ++j) sum += p[order[j]];
      float* yr = y.data() + t * C;
      std::fill(yr, yr + C, 0.f);
      for (int64_t j = 0; j < K; ++j) {
        const int32_t e = order[j];
        linear(x.data() + t * C, 1, gate[e], nullptr, g.data());
        linear(x.data() + t * C, 1, up[e], nullptr, u.data());
        silu_mul(g.data(), u.data(), 1, I, g.data());
        linear(g.data(), 1, down[e], nullptr, o.data());
        for (int64_t c = 0; c < C; ++c) yr[c] += o[c] * (p[e] / sum);
      }
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(T), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(grouped)->Name("grouped")->Arg(1)->Arg(8)->Arg(64)->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(per_token)->Name("per_token")->Arg(1)->Arg(8)->Arg(64)->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace vlm

BENCHMARK_MAIN();
