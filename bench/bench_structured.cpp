// Structured-output cost per generated token (engine/structured/), on the Qwen3 vocabulary
// (151 669 tokens; tests/data/tokenizers/qwen3) with a model vocabulary of 151 936 rows (the
// demo model's and Qwen2-0.5B's). A constrained walk through a JSON Schema: each step takes the
// mask of the current state and picks an allowed token (deterministic), like a decode.
//   mask_cold:  a fresh GrammarMatcher per pass: every state's mask is walked over the trie
//               (a new schema's first request);
//   mask_warm:  the same matcher again: masks come from the per-state cache (later requests);
//   sample_unconstrained / sample_constrained: Sampler::sample on one 151 936 logits row
//               (temperature 1, top_p 1), without and with the constraint (its mask applied,
//               warm), i.e. the sampler's whole time per token with and without structured output.
// Counter per_token: seconds per generated token (time / tokens of the walk).
// Run: build/bin/bench_structured --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <memory>
#include <random>

#include "engine/sampling/sampler.h"
#include "engine/structured/constraint_cache.h"
#include "engine/structured/token_vocabulary.h"
#include "model/tokenizer/tokenizer.h"

namespace {

using namespace vlm;
using namespace vlm::structured;

constexpr int64_t kModelVocab = 151936;
const char* kSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":24},"age":{"type":"integer"},
  "email":{"type":"string","pattern":"^[a-z]+@[a-z]+\\.com$"},
  "tags":{"type":"array","items":{"enum":["red","green","blue"]},"maxItems":4},
  "address":{"type":"object","properties":{"city":{"type":"string","maxLength":16},"zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["city","zip"]}},
  "required":["name","age","email","tags","address"]})";

std::shared_ptr<const TokenVocabulary> vocab() {
  static auto v = [] {
    auto tok = Tokenizer::load(std::string(VLM_SOURCE_DIR) + "/tests/data/tokenizers/qwen3");
    return vocabulary_of(*tok, {*tok->token_to_id("<|im_end|>")});
  }();
  return v;
}

// The tokens of one constrained walk: at each step the allowed token chosen by a fixed-seed RNG
// (longer tokens preferred, so strings end), until the grammar accepts and nothing else fits or
// 200 tokens.
std::vector<int32_t> walk(GrammarMatcher& m) {
  std::mt19937 rng(5);
  std::vector<int32_t> out;
  uint32_t s = m.initial_state();
  for (int step = 0; step < 200 && m.can_continue(s); ++step) {
    const auto& mask = m.token_mask(s);
    std::vector<int32_t> ok;
    for (size_t w = 0; w < mask.size(); ++w)
      for (uint64_t bits = mask[w]; bits; bits &= bits - 1) {
        const auto t = static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(bits)));
        if (m.vocabulary().is_text(t)) ok.push_back(t);
      }
    if (ok.empty()) break;
    int32_t pick = ok[std::uniform_int_distribution<size_t>(0, ok.size() - 1)(rng)];
    for (int k = 0; k < 3; ++k) {  // prefer a closing quote / bracket when one is allowed
      const int32_t t = ok[std::uniform_int_distribution<size_t>(0, ok.size() - 1)(rng)];
      const std::string& b = m.vocabulary().bytes(t);
      if (b.find_first_of("\"]}") != std::string::npos) pick = t;
    }
    out.push_back(pick);
    s = m.advance_token(s, pick);
  }
  return out;
}

void BM_mask_cold(benchmark::State& state) {
  const Grammar g = compile_constraint({ConstraintSpec::Kind::JsonSchema, kSchema, {}});
  int64_t tokens = 0;
  for (auto _ : state) {
    GrammarMatcher m(g, vocab());
    tokens += static_cast<int64_t>(walk(m).size());
  }
  state.counters["per_token"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_mask_cold)->Unit(benchmark::kMillisecond)->Iterations(2);

void BM_mask_warm(benchmark::State& state) {
  GrammarMatcher m(compile_constraint({ConstraintSpec::Kind::JsonSchema, kSchema, {}}), vocab());
  walk(m);
  int64_t tokens = 0;
  for (auto _ : state) tokens += static_cast<int64_t>(walk(m).size());
  state.counters["per_token"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_mask_warm)->Unit(benchmark::kMillisecond);

void sample_bench(benchmark::State& state, bool constrained) {
  auto m = std::make_shared<GrammarMatcher>(compile_constraint({ConstraintSpec::Kind::JsonSchema, kSchema, {}}), vocab());
  const std::vector<int32_t> path = walk(*m);  // warms the masks of the states visited
  std::vector<float> logits(kModelVocab);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0, 2);
  for (float& x : logits) x = nd(rng);
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 1.0f;
  if (constrained) p.constraint = m;
  Sampler sampler(kModelVocab, {*vocab()->eos_ids().begin()});
  int64_t tokens = 0;
  for (auto _ : state) {
    Sequence seq(0, {1, 2, 3}, p);
    for (int32_t t : path) {
      const uint32_t before = seq.constraint_state;
      benchmark::DoNotOptimize(sampler.sample(logits.data(), seq));
      if (constrained) seq.constraint_state = m->advance_token(before, t);  // follow the walk
      ++tokens;
    }
  }
  state.counters["per_token"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
void BM_sample_unconstrained(benchmark::State& s) { sample_bench(s, false); }
void BM_sample_constrained(benchmark::State& s) { sample_bench(s, true); }
BENCHMARK(BM_sample_unconstrained)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_sample_constrained)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
