// The engine against the decoder run alone: 16 sequences of different lengths, submitted at
// staggered steps, generate (greedy) exactly the tokens each generates alone through the test
// harness, and the Hugging Face greedy tokens where the fixture has them; also when the KV cache
// is so small that sequences get preempted and recomputed, and for prefill chunks of 16, 64, 512.
// Seeded sampling gives the same tokens whatever else runs in the batch.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/engine/engine_test_util.h"

namespace vlm::testing {
namespace {

struct Workload {
  std::vector<Submission> subs;
  std::map<std::string, std::vector<int32_t>> alone;  // greedy tokens of each request run alone
  std::map<std::string, std::vector<int32_t>> hf;     // Hugging Face greedy tokens, where known
};

// 4 reference prompts (1-150 tokens) and 12 synthetic ones (2-129 tokens), arriving over ~40 steps.
const Workload& workload(const std::string& model) {
  static std::map<std::string, Workload> cache;
  auto it = cache.find(model);
  if (it != cache.end()) return it->second;
  Workload w;
  const Reference ref = load_reference(model);
  DecoderRunner alone(model, 16, 512);
  const int64_t V = alone.vocab();
  const int lengths[12] = {2, 5, 12, 17, 23, 31, 40, 47, 64, 80, 100, 129};
  uint32_t lcg = 12345;
  for (int i = 0; i < 16; ++i) {
    std::vector<int32_t> prompt;
    int max_tokens;
    if (i % 4 == 0) {
      const int p = i / 4;
      prompt = ref.ids(p);
      w.hf["r" + std::to_string(i)] = ref.greedy(p);
      max_tokens = static_cast<int>(ref.greedy(p).size());
    } else {
      for (int k = 0; k < lengths[i - 1 - i / 4]; ++k) {
        lcg = lcg * 1664525u + 1013904223u;
        prompt.push_back(static_cast<int32_t>((lcg >> 8) % V));
      }
      max_tokens = 6 + (i * 7) % 19;
    }
    const std::string id = "r" + std::to_string(i);
    TestSequence seq{prompt};
    w.alone[id] = alone.greedy(seq, max_tokens);
    w.subs.push_back({(i * 5) / 2, greedy_request(id, prompt, max_tokens)});
  }
  return cache.emplace(model, std::move(w)).first->second;
}

void expect_matches(const Workload& w, const std::map<std::string, RequestResult>& results) {
  for (const auto& [id, want] : w.alone) {
    const RequestResult& r = results.at(id);
    ASSERT_TRUE(r.done) << id;
    ASSERT_FALSE(r.error) << id << ": " << r.error->message;
    EXPECT_EQ(r.choices.at(0).tokens, want) << id << " differs from its run alone";
    EXPECT_EQ(r.choices.at(0).finish, FinishReason::Length) << id;
    auto hf = w.hf.find(id);
    if (hf != w.hf.end()) EXPECT_EQ(r.choices.at(0).tokens, hf->second) << id << " differs from Hugging Face";
  }
}

class EngineFixture : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    // qwen3_tiny and qwen3_moe_tiny are made on the GPU machine (tools/fixtures/run_qwen3_fixtures.sh,
    // tools/fixtures/make_qwen3_moe_fixtures.py): skip until then.
    if (!std::filesystem::exists(fixture_model_dir(GetParam()) + "/reference.safetensors"))
      GTEST_SKIP() << "fixture tests/fixtures/models/" << GetParam() << " not generated yet: run "
                   << (GetParam().rfind("qwen3_moe", 0) == 0 ? "tools/fixtures/make_qwen3_moe_fixtures.py"
                                                            : "tools/fixtures/run_qwen3_fixtures.sh")
                   << " on the GPU machine";
  }
};

TEST_P(EngineFixture, StaggeredSequencesMatchTheirRunsAlone) {
  const Workload& w = workload(GetParam());
  auto engine = make_engine(GetParam(), test_config(16, 256, 512));
  expect_matches(w, run_engine(*engine, w.subs));
  EXPECT_EQ(engine->stats().num_preemptions, 0);
  EXPECT_EQ(engine->stats().num_requests_finished[static_cast<int>(FinishReason::Length)], 16);
}

TEST_P(EngineFixture, PreemptionAndRecomputeChangeNothing) {
  const Workload& w = workload(GetParam());
  EngineConfig c = test_config(8, 24, 128);  // 192 cache slots for 16 sequences of up to ~170 tokens
  c.max_model_len = 192;
  auto engine = make_engine(GetParam(), c);
  expect_matches(w, run_engine(*engine, w.subs));
  EXPECT_GT(engine->stats().num_preemptions, 0);
  EXPECT_GT(engine->stats().num_computed_prefill_tokens, engine->stats().num_prompt_tokens)
      << "recomputation runs some prefill twice";
}

INSTANTIATE_TEST_SUITE_P(Models, EngineFixture,
                         ::testing::Values("llama_tiny", "llama3_tiny", "llama_linear_f32", "qwen2_tiny",
                                           "qwen2_yarn_f16", "qwen3_tiny", "qwen3_moe_tiny"));

class EngineChunks : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(EngineChunks, ChunkSizeChangesNothing) {
  const auto& [model, chunk] = GetParam();
  const Workload& w = workload(model);
  EngineConfig c = test_config(16, 256, chunk);
  c.scheduler.prefill_chunk_size = chunk;
  auto engine = make_engine(model, c);
  expect_matches(w, run_engine(*engine, w.subs));
}

INSTANTIATE_TEST_SUITE_P(Chunks, EngineChunks,
                         ::testing::Combine(::testing::Values("llama_tiny", "llama3_tiny", "llama_linear_f32", "qwen2_tiny",
                                                              "qwen2_yarn_f16"),
                                            ::testing::Values(16, 64, 512)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_chunk" + std::to_string(std::get<1>(info.param));
                         });

// The prefill-only budget (SchedulerConfig::prefill_only_batched_tokens, issue 38): steps without
// decodes batch up to it, steps with one keep max_num_batched_tokens; the tokens stay each
// request's run alone (and Hugging Face's), with staggered arrivals (steps of both kinds), and
// under preemption (blocks checked after every step: test_config).
class EnginePrefillOnly : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(EnginePrefillOnly, StaggeredSequencesMatchTheirRunsAlone) {
  const auto& [model, prefill_only] = GetParam();
  const Workload& w = workload(model);
  EngineConfig c = test_config(16, 256, 16);
  c.scheduler.prefill_only_batched_tokens = prefill_only;
  auto engine = make_engine(model, c);
  EXPECT_EQ(engine->config().scheduler.prefill_only_batched_tokens, prefill_only);
  expect_matches(w, run_engine(*engine, w.subs));
}

TEST_P(EnginePrefillOnly, PreemptionAndRecomputeChangeNothing) {
  const auto& [model, prefill_only] = GetParam();
  const Workload& w = workload(model);
  EngineConfig c = test_config(8, 24, 16);  // 192 cache slots for 16 sequences of up to ~170 tokens
  c.max_model_len = 192;
  c.scheduler.prefill_only_batched_tokens = prefill_only;
  auto engine = make_engine(model, c);
  expect_matches(w, run_engine(*engine, w.subs));
  EXPECT_GT(engine->stats().num_preemptions, 0);
}

INSTANTIATE_TEST_SUITE_P(Budgets, EnginePrefillOnly,
                         ::testing::Combine(::testing::Values("llama_tiny", "qwen2_tiny", "qwen2_yarn_f16"),
                                            ::testing::Values(40, 160)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_po" + std::to_string(std::get<1>(info.param));
                         });

// The last submission's result, and the largest step the engine ran with
// and without a decode in it.
struct StepRun {
  RequestResult result;
  int64_t max_prefill_only_step = 0;
  int64_t max_decode_step = 0;
};

StepRun run_stepwise(Engine& engine, std::vector<Submission> subs) {
  StepRun r;
  std::map<std::string, std::shared_ptr<RequestChannel>> channels;
  std::map<std::string, RequestResult> results;
  size_t next = 0;
  for (int step = 0; step < 2000 && (next < subs.size() || engine.has_unfinished()); ++step) {
    for (; next < subs.size() && subs[next].step <= step; ++next) {
      auto ch = std::make_shared<RequestChannel>();
      channels[subs[next].request.id] = ch;
      engine.add_request(subs[next].request, ch);
    }
    engine.step();
    const EngineStats& st = engine.stats();
    int64_t& m = st.last_step_num_decode_seqs > 0 ? r.max_decode_step : r.max_prefill_only_step;
    m = std::max(m, st.last_step_num_tokens);
    for (auto& [id, ch] : channels) collect(*ch, results[id]);
  }
  EXPECT_FALSE(engine.has_unfinished());
  EXPECT_EQ(engine.block_manager().num_used_blocks(), 0);
  r.result = results.at(subs.back().request.id);
  return r;
}

TEST(EnginePrefillOnlyLogprobs, BigChunksGiveTheSameTokensAndLogprobs) {
  // qwen2_tiny's longest reference prompt (150 tokens) under a 16-token budget, beside a short
  // request admitted in the same first step: while the short one decodes (steps 2-6) the long
  // one's chunks are held to the budget (15 tokens), then (prefill-only 64) they grow to 64.
  const std::string model = "qwen2_tiny";
  const Reference ref = load_reference(model);
  int longest = 0;
  for (int p = 1; p < 4; ++p)
    if (ref.ids(p).size() > ref.ids(longest).size()) longest = p;
  GenerationRequest longp = greedy_request("long", ref.ids(longest), 12);
  longp.params.logprobs = 8;
  GenerationRequest shortp = greedy_request("short", {11, 22, 33, 44}, 6);
  std::vector<StepRun> runs;
  for (int po : {0, 64}) {
    SCOPED_TRACE("prefill_only_batched_tokens " + std::to_string(po));
    EngineConfig c = test_config(16, 64, 16);
    c.scheduler.prefill_only_batched_tokens = po;
    auto engine = make_engine(model, c);
    runs.push_back(run_stepwise(*engine, {{0, shortp}, {0, longp}}));
    ASSERT_FALSE(runs.back().result.error);
  }
  ASSERT_GE(ref.ids(longest).size(), 140u);
  EXPECT_EQ(runs[0].max_prefill_only_step, 16);
  EXPECT_EQ(runs[1].max_prefill_only_step, 64);
  EXPECT_LE(runs[1].max_decode_step, 16);  // a step with a decode keeps the budget
  const auto& a = runs[0].result.choices.at(0);
  const auto& b = runs[1].result.choices.at(0);
  ASSERT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
  for (size_t s = 0; s < a.logprobs.size(); ++s) {
    ASSERT_EQ(a.logprobs[s].top.size(), b.logprobs[s].top.size());
    EXPECT_NEAR(a.logprobs[s].logprob, b.logprobs[s].logprob, 1e-4) << s;
    for (size_t i = 0; i < a.logprobs[s].top.size(); ++i) {
      EXPECT_EQ(a.logprobs[s].top[i].token_id, b.logprobs[s].top[i].token_id) << s << " " << i;
      EXPECT_NEAR(a.logprobs[s].top[i].logprob, b.logprobs[s].top[i].logprob, 1e-4) << s << " " << i;
    }
  }
}

GenerationRequest sampled_request(std::string id, std::vector<int32_t> prompt, uint64_t seed, int n = 1) {
  GenerationRequest r = greedy_request(std::move(id), std::move(prompt), 20);
  r.params.temperature = 0.9f;
  r.params.top_k = 40;
  r.params.top_p = 0.95f;
  r.params.seed = seed;
  r.params.n = n;
  return r;
}

TEST(EngineSampling, SeededSamplingIsTheSameWhateverTheBatch) {
  const std::string model = "qwen2_tiny";
  const Reference ref = load_reference(model);
  const std::vector<int32_t> prompt = ref.ids(2);
  // Alone.
  auto engine = make_engine(model, test_config());
  auto alone = run_engine(*engine, {{0, sampled_request("x", prompt, 42)}});
  const std::vector<int32_t> want = alone.at("x").choices.at(0).tokens;
  ASSERT_EQ(want.size(), 20u);
  // Among other requests (seeded and not, greedy and sampled), arriving before and after it.
  std::vector<Submission> subs;
  for (int i = 0; i < 6; ++i) {
    GenerationRequest r = sampled_request("o" + std::to_string(i), ref.ids(i % 4), 1000 + i);
    if (i % 3 == 0) r.params.seed.reset();
    if (i % 3 == 1) r.params.temperature = 0;
    subs.push_back({i, r});
  }
  subs.insert(subs.begin() + 3, {2, sampled_request("x", prompt, 42)});
  auto engine2 = make_engine(model, test_config(16, 256, 32));
  auto mixed = run_engine(*engine2, subs);
  EXPECT_EQ(mixed.at("x").choices.at(0).tokens, want);
  // Another seed gives other tokens (the test could fail).
  auto other = run_engine(*engine, {{0, sampled_request("y", prompt, 43)}});
  EXPECT_NE(other.at("y").choices.at(0).tokens, want);
}

// n choices share the prompt's blocks; choice i samples with seed + i, so it equals a single
// request with that seed. A 70-token prompt ends inside a block: the first decode of each
// choice copies that shared block.
TEST(EngineSampling, ParallelChoicesShareThePromptAndMatchSingleRequests) {
  const std::string model = "llama3_tiny";
  const std::vector<int32_t> prompt = load_reference(model).ids(2);
  auto engine = make_engine(model, test_config());
  auto many = run_engine(*engine, {{0, sampled_request("n3", prompt, 7, 3)}});
  const RequestResult& r = many.at("n3");
  ASSERT_EQ(r.choices.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    auto single = run_engine(*engine, {{0, sampled_request("s", prompt, 7 + i)}});
    EXPECT_EQ(r.choices.at(i).tokens, single.at("s").choices.at(0).tokens) << "choice " << i;
  }
  EXPECT_NE(r.choices.at(0).tokens, r.choices.at(1).tokens);
  ASSERT_TRUE(r.usage);
  EXPECT_EQ(r.usage->prompt_tokens, 70);
  EXPECT_EQ(r.usage->completion_tokens, 60);
  // Greedy choices are all the greedy continuation.
  const std::vector<int32_t> hf = load_reference(model).greedy(2);
  GenerationRequest g = greedy_request("g", prompt, static_cast<int>(hf.size()));
  g.params.n = 4;
  auto greedy = run_engine(*engine, {{0, g}});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(greedy.at("g").choices.at(i).tokens, hf) << "choice " << i;
}

}  // namespace
}  // namespace vlm::testing
