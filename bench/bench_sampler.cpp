// Sampler::sample (engine/sampling/sampler.h) on one row of Qwen's vocabulary (151,936 logits),
// one thread: the per-token cost a step pays per sequence after its LM head. Rows: "peaked"
// (N(0, 2) with 40 tokens far above the rest, like a trained model's) and "flat" (N(0, 0.3), like
// the random demo model's). Cases: greedy; temperature 1 (the OpenAI default, nothing cut);
// top_k 50; top_p 0.9; top_k 50 + top_p 0.9; min_p 0.05; penalties (repetition 1.1, frequency 0.2,
// presence 0.2 over a 2,000-token prompt and 200 outputs); logprobs 5 (with temperature 1).
// Run: build/bin/bench_sampler --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "engine/sampling/sampler.h"

namespace {

constexpr int64_t kVocab = 151936;

std::vector<float> make_row(bool peaked) {
  std::mt19937 g(peaked ? 1 : 2);
  std::normal_distribution<float> n(0.0f, peaked ? 2.0f : 0.3f);
  std::vector<float> l(kVocab);
  for (float& x : l) x = n(g);
  if (peaked) {
    std::uniform_int_distribution<int64_t> id(0, kVocab - 1);
    for (int i = 0; i < 40; ++i) l[id(g)] = 8.0f + static_cast<float>(i % 7);
  }
  return l;
}

vlm::SamplingParams params_of(int c) {
  vlm::SamplingParams p;
  switch (c) {
    case 0: p.temperature = 0; break;
    case 1: break;
    case 2: p.top_k = 50; break;
    case 3: p.top_p = 0.9f; break;
    case 4: p.top_k = 50, p.top_p = 0.9f; break;
    case 5: p.min_p = 0.05f; break;
    case 6: p.repetition_penalty = 1.1f, p.frequency_penalty = 0.2f, p.presence_penalty = 0.2f; break;
    case 7: p.logprobs = 5; break;
  }
  return p;
}

const char* kCaseNames[] = {"greedy", "temperature_1", "top_k_50", "top_p_0.9", "top_k_50+top_p_0.9",
                            "min_p_0.05", "penalties", "logprobs_5"};

void BM_Sample(benchmark::State& state) {
  const bool peaked = state.range(0) == 1;
  const int c = static_cast<int>(state.range(1));
  const std::vector<float> row = make_row(peaked);
  std::mt19937 g(3);
  std::uniform_int_distribution<int32_t> tok(0, kVocab - 1);
  std::vector<int32_t> prompt(2000);
  for (int32_t& t : prompt) t = tok(g);
  vlm::Sequence seq(1, prompt, params_of(c));
  for (int i = 0; i < 200; ++i) seq.token_ids.push_back(tok(g));
  vlm::Sampler sampler(kVocab, {151645});
  for (auto _ : state) benchmark::DoNotOptimize(sampler.sample(row.data(), seq).token_id);
  state.SetLabel(std::string(peaked ? "peaked " : "flat ") + kCaseNames[c]);
}

BENCHMARK(BM_Sample)->ArgsProduct({{1, 0}, {0, 1, 2, 3, 4, 5, 6, 7}})->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
