// Sampler options one by one, on hand-made logits: each test would fail if its option were
// ignored or applied with other semantics than vLLM's.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

#include "engine/sampling/sampler.h"
#include "kernels/core/check.h"

namespace vlm {
namespace {

Sequence seq_with(std::vector<int32_t> prompt, std::vector<int32_t> outputs, SamplingParams p, uint64_t seed = 1) {
  Sequence s(1, std::move(prompt), p);
  s.token_ids.insert(s.token_ids.end(), outputs.begin(), outputs.end());
  s.rng.seed(seed);
  return s;
}

// logits = log(probs): a distribution we can read off.
std::vector<float> log_probs(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

// Empirical frequencies of n draws.
std::map<int32_t, double> draw(Sampler& s, const std::vector<float>& logits, SamplingParams p, int n = 20000) {
  Sequence seq = seq_with({0}, {}, p, 1234);
  std::map<int32_t, double> freq;
  for (int i = 0; i < n; ++i) freq[s.sample(logits.data(), seq).token_id] += 1.0 / n;
  return freq;
}

SamplingParams random_params() {
  SamplingParams p;
  p.temperature = 1.0f;
  return p;
}

TEST(Sampler, GreedyTakesTheArgmaxLowestIdOnTiesAndLeavesTheRngAlone) {
  Sampler s(5, {});
  SamplingParams p;
  p.temperature = 0;
  Sequence seq = seq_with({0}, {}, p);
  const std::mt19937_64 before = seq.rng;
  const std::vector<float> logits = {0.1f, 3.0f, -1.0f, 3.0f, 2.9f};
  EXPECT_EQ(s.sample(logits.data(), seq).token_id, 1);
  EXPECT_TRUE(seq.rng == before);
}

TEST(Sampler, TemperatureOneFollowsTheSoftmax) {
  Sampler s(4, {});
  const auto f = draw(s, log_probs({0.5, 0.3, 0.15, 0.05}), random_params());
  EXPECT_NEAR(f.at(0), 0.5, 0.015);
  EXPECT_NEAR(f.at(1), 0.3, 0.015);
  EXPECT_NEAR(f.at(2), 0.15, 0.015);
  EXPECT_NEAR(f.at(3), 0.05, 0.01);
}

// The default draw (nothing cut) searches block sums of 1024 tokens: tokens in different blocks,
// in the first and the last (partial) block, masked tokens between them never drawn.
TEST(Sampler, TemperatureOneAcrossBlocksOfALargeVocabulary) {
  const int64_t V = 5000;
  Sampler s(V, {});
  std::vector<float> logits(V, -std::numeric_limits<float>::infinity());
  const std::pair<int32_t, double> probs[] = {{3, 0.2}, {1023, 0.1}, {1024, 0.3}, {2500, 0.25}, {4999, 0.15}};
  for (auto [t, q] : probs) logits[t] = static_cast<float>(std::log(q));
  const auto f = draw(s, logits, random_params());
  double seen = 0;
  for (auto [t, q] : probs) {
    EXPECT_NEAR(f.count(t) ? f.at(t) : 0.0, q, 0.015) << t;
    seen += f.count(t) ? f.at(t) : 0.0;
  }
  EXPECT_NEAR(seen, 1.0, 1e-9);  // nothing else
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  Sampler s(2, {});
  const auto logits = log_probs({0.75, 0.25});  // odds 3:1
  SamplingParams p = random_params();
  p.temperature = 0.5f;  // odds 9:1
  EXPECT_NEAR(draw(s, logits, p).at(0), 0.9, 0.015);
  p.temperature = 2.0f;  // odds sqrt(3):1
  EXPECT_NEAR(draw(s, logits, p).at(0), std::sqrt(3.0) / (1 + std::sqrt(3.0)), 0.015);
}

TEST(Sampler, TopKKeepsTheKMostLikely) {
  Sampler s(4, {});
  SamplingParams p = random_params();
  p.top_k = 2;
  const auto f = draw(s, log_probs({0.15, 0.5, 0.05, 0.3}), p);
  EXPECT_EQ(f.count(0) + f.count(2), 0u);
  EXPECT_NEAR(f.at(1), 0.5 / 0.8, 0.015);
}

TEST(Sampler, TopPKeepsTokensWhileTheMassBeforeThemIsBelowP) {
  Sampler s(4, {});
  const auto logits = log_probs({0.05, 0.3, 0.5, 0.15});
  SamplingParams p = random_params();
  p.top_p = 0.79f;  // 0.5 + 0.3 reach it: {2, 1}
  auto f = draw(s, logits, p);
  EXPECT_EQ(f.size(), 2u);
  EXPECT_NEAR(f.at(2), 0.5 / 0.8, 0.015);
  p.top_p = 0.81f;  // the mass before 0.15 is 0.8 < 0.81: {2, 1, 3}
  f = draw(s, logits, p);
  EXPECT_EQ(f.size(), 3u);
  EXPECT_EQ(f.count(0), 0u);
  p.top_p = 0.1f;  // always the most likely one
  f = draw(s, logits, p, 2000);
  EXPECT_EQ(f.size(), 1u);
  EXPECT_EQ(f.count(2), 1u);
}

TEST(Sampler, TopPOverALargeVocabulary) {
  // 2000 tokens: the sorted prefix has to grow past its first guesses.
  const int V = 2000;
  std::vector<double> probs(V, 1.0 / V);
  Sampler s(V, {});
  SamplingParams p = random_params();
  p.top_p = 0.5f;
  const auto f = draw(s, log_probs(probs), p, 1000);
  int32_t max_id = 0;
  for (const auto& [id, _] : f) max_id = std::max(max_id, id);
  EXPECT_LT(max_id, V / 2 + 1) << "equal probabilities: the lowest ids are kept first";
  EXPECT_GT(f.size(), 400u);
}

TEST(Sampler, MinPDropsTokensBelowAFractionOfTheTop) {
  Sampler s(4, {});
  SamplingParams p = random_params();
  p.min_p = 0.2f;  // cut at 0.1: the 0.05 token goes
  const auto f = draw(s, log_probs({0.5, 0.3, 0.15, 0.05}), p);
  EXPECT_EQ(f.count(3), 0u);
  EXPECT_NEAR(f.at(2), 0.15 / 0.95, 0.015);
}

SampleResult greedy_with(const std::vector<float>& logits, std::vector<int32_t> prompt, std::vector<int32_t> outputs,
                         SamplingParams p) {
  p.temperature = 0;
  Sampler s(static_cast<int64_t>(logits.size()), {});
  Sequence seq = seq_with(std::move(prompt), std::move(outputs), p);
  return s.sample(logits.data(), seq);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  // Token 0 (logit 2.0) seen in the prompt: 2.0 / 2 = 1.0 < 1.5.
  EXPECT_EQ(greedy_with({2.0f, 1.5f, 0.0f}, {0}, {}, p).token_id, 1);
  // Seen in the output: the same.
  EXPECT_EQ(greedy_with({2.0f, 1.5f, 0.0f}, {2}, {0}, p).token_id, 1);
  // Negative logit: -1.0 * 2 = -2.0 < -1.5.
  EXPECT_EQ(greedy_with({-1.0f, -1.5f, -3.0f}, {0}, {}, p).token_id, 1);
  p.repetition_penalty = 1.0f;
  EXPECT_EQ(greedy_with({2.0f, 1.5f, 0.0f}, {0}, {}, p).token_id, 0);
}

TEST(Sampler, FrequencyPenaltyCountsOutputOccurrencesOnly) {
  SamplingParams p;
  p.frequency_penalty = 0.3f;
  EXPECT_EQ(greedy_with({1.0f, 0.5f}, {1}, {0, 0}, p).token_id, 1);   // 1.0 - 0.6 < 0.5
  EXPECT_EQ(greedy_with({1.0f, 0.5f}, {1}, {0}, p).token_id, 0);      // 1.0 - 0.3 > 0.5
  EXPECT_EQ(greedy_with({1.0f, 0.5f}, {0, 0, 0}, {}, p).token_id, 0);  // prompt tokens: no penalty
}

TEST(Sampler, PresencePenaltyIsPaidOnce) {
  SamplingParams p;
  p.presence_penalty = 0.6f;
  EXPECT_EQ(greedy_with({1.0f, 0.5f}, {1}, {0}, p).token_id, 1);
  p.presence_penalty = 0.4f;
  EXPECT_EQ(greedy_with({1.0f, 0.5f}, {1}, {0, 0, 0}, p).token_id, 0);  // 1.0 - 0.4, not - 1.2
  p.presence_penalty = -1.0f;  // negative: encourages repeats
  EXPECT_EQ(greedy_with({0.5f, 1.0f}, {1}, {0}, p).token_id, 0);
}

TEST(Sampler, MinTokensMasksEosAndStopTokens) {
  const std::vector<float> logits = {0.0f, 5.0f, 4.0f, 1.0f};  // 1 = EOS, 2 = a stop token
  Sampler s(4, {1});
  SamplingParams p;
  p.temperature = 0;
  p.min_tokens = 2;
  p.stop_token_ids = {2};
  Sequence seq = seq_with({0}, {3}, p);  // one output so far
  EXPECT_EQ(s.sample(logits.data(), seq).token_id, 3);
  seq.token_ids.push_back(3);  // two outputs: no more masking
  EXPECT_EQ(s.sample(logits.data(), seq).token_id, 1);
  p.ignore_eos = true;  // EOS is not a stop token then: not masked
  Sequence seq2 = seq_with({0}, {}, p);
  EXPECT_EQ(s.sample(logits.data(), seq2).token_id, 1);
}

TEST(Sampler, LogprobsAreThoseOfTheRawLogits) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f};
  double z = 0;
  for (float l : logits) z += std::exp(l);
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 10.0f;  // moves the choice, not the reported logprobs
  p.logprobs = 2;
  const SampleResult r = greedy_with(logits, {1}, {}, p);
  EXPECT_EQ(r.token_id, 2);
  ASSERT_TRUE(r.logprobs);
  EXPECT_NEAR(r.logprobs->logprob, 2.0 - std::log(z), 1e-5);
  EXPECT_EQ(r.logprobs->rank, 2);
  ASSERT_EQ(r.logprobs->top.size(), 2u);
  EXPECT_EQ(r.logprobs->top[0].token_id, 1);
  EXPECT_NEAR(r.logprobs->top[0].logprob, 3.0 - std::log(z), 1e-5);
  EXPECT_EQ(r.logprobs->top[1].token_id, 2);
  p.logprobs = -1;
  EXPECT_EQ(greedy_with(logits, {1}, {}, p).logprobs->top.size(), 4u);
  p.logprobs = std::nullopt;
  EXPECT_FALSE(greedy_with(logits, {1}, {}, p).logprobs);
}

TEST(Sampler, SeededDrawsRepeatAndUseOneNumberPerToken) {
  Sampler s(50, {});
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[i] = static_cast<float>(std::sin(i));
  SamplingParams p = random_params();
  auto run = [&](uint64_t seed) {
    Sequence seq = seq_with({0}, {}, p, seed);
    std::vector<int32_t> out;
    for (int i = 0; i < 40; ++i) out.push_back(s.sample(logits.data(), seq).token_id);
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
  Sequence seq = seq_with({0}, {}, p, 99);
  std::mt19937_64 expected(99);
  s.sample(logits.data(), seq);
  expected.discard(1);
  EXPECT_TRUE(seq.rng == expected);
}

TEST(SamplingParams, ValidateNamesTheBadField) {
  auto field_of = [](SamplingParams p) -> std::string {
    try {
      p.validate(100);
    } catch (const RequestError& e) {
      EXPECT_EQ(e.status(), 400);
      return e.param();
    }
    return "";
  };
  SamplingParams p;
  EXPECT_EQ(field_of(p), "");
  p.top_p = 0;
  EXPECT_EQ(field_of(p), "top_p");
  p = {};
  p.temperature = -1;
  EXPECT_EQ(field_of(p), "temperature");
  p = {};
  p.stop_token_ids = {100};
  EXPECT_EQ(field_of(p), "stop_token_ids");
  p = {};
  p.max_tokens = 0;
  EXPECT_EQ(field_of(p), "max_tokens");
  p = {};
  p.n = 0;
  EXPECT_EQ(field_of(p), "n");
  p = {};
  p.stop = {""};
  EXPECT_EQ(field_of(p), "stop");
}

}  // namespace
}  // namespace vlm
