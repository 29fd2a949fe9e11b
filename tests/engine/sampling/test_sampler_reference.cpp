// The Sampler's block-wise passes (block maxima, patches instead of a copied row, cuts searched
// only in the blocks that can reach them) against the naive reference in sampler_reference.h, on
// rows of Qwen's vocabulary size: the same token ids for the same seeds, the RNG advanced alike,
// the row never written; greedy's corner cases at block edges; logprobs against whole-row sums.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>

#include "engine/sampling/sampler.h"
#include "tests/engine/sampling/sampler_reference.h"

namespace vlm::testing {
namespace {

constexpr int64_t kQwenVocab = 151936;
const float kNegInf = -std::numeric_limits<float>::infinity();

// A model-like row: N(0, sigma) with a few tokens far above the rest (peaked) or not (flat, as the
// random demo model's rows are).
std::vector<float> random_row(int64_t V, float sigma, bool peaked, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, sigma);
  std::vector<float> l(static_cast<size_t>(V));
  for (float& x : l) x = n(g);
  if (peaked) {
    std::uniform_int_distribution<int64_t> id(0, V - 1);
    for (int i = 0; i < 40; ++i) l[id(g)] = 8.0f + static_cast<float>(i % 7);
  }
  return l;
}

Sequence make_seq(std::vector<int32_t> prompt, const std::vector<int32_t>& outputs, const SamplingParams& p, uint64_t seed) {
  Sequence s(1, std::move(prompt), p);
  s.token_ids.insert(s.token_ids.end(), outputs.begin(), outputs.end());
  s.rng.seed(seed);
  return s;
}

struct Case {
  std::string name;
  SamplingParams p;
};

std::vector<Case> cases(const std::vector<float>& row) {
  std::vector<Case> c;
  auto add = [&](std::string name, auto&& set) {
    SamplingParams p;
    set(p);
    c.push_back({std::move(name), p});
  };
  add("greedy", [](SamplingParams& p) { p.temperature = 0; });
  add("temperature 1", [](SamplingParams&) {});
  add("temperature 0.7", [](SamplingParams& p) { p.temperature = 0.7f; });
  add("temperature 1.3", [](SamplingParams& p) { p.temperature = 1.3f; });
  add("top_k 1", [](SamplingParams& p) { p.top_k = 1; });
  add("top_k 50", [](SamplingParams& p) { p.top_k = 50; });
  add("top_k 5000 (more than the blocks)", [](SamplingParams& p) { p.top_k = 5000; });
  add("top_p 0.5", [](SamplingParams& p) { p.top_p = 0.5f; });
  add("top_p 0.95, temperature 0.8", [](SamplingParams& p) { p.top_p = 0.95f, p.temperature = 0.8f; });
  add("min_p 0.05", [](SamplingParams& p) { p.min_p = 0.05f; });
  add("top_k 40 + top_p 0.9 + min_p 0.01", [](SamplingParams& p) { p.top_k = 40, p.top_p = 0.9f, p.min_p = 0.01f; });
  // The row's best token gets the penalties and a bias: patched blocks must be re-read.
  const auto best = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
  add("penalties", [&](SamplingParams& p) {
    p.repetition_penalty = 1.3f, p.frequency_penalty = 0.5f, p.presence_penalty = 0.3f;
    p.logit_bias = {{best, -5.0f}, {7, 3.0f}, {kQwenVocab - 1, 100.0f}};
  });
  add("penalties, greedy", [&](SamplingParams& p) {
    p.temperature = 0, p.repetition_penalty = 1.5f, p.frequency_penalty = 1.0f;
    p.logit_bias = {{best, -100.0f}};
  });
  add("penalties + top_k 20 + top_p 0.8", [&](SamplingParams& p) {
    p.repetition_penalty = 2.0f, p.presence_penalty = 1.0f, p.top_k = 20, p.top_p = 0.8f;
    p.logit_bias = {{best, -2.0f}};
  });
  add("min_tokens masks EOS and a stop token", [&](SamplingParams& p) {
    p.min_tokens = 10, p.stop_token_ids = {best}, p.temperature = 0.5f;
  });
  return c;
}

TEST(SamplerReference, SameTokenIdsAndRngAsTheNaiveReferenceOnAQwenSizedRow) {
  const std::vector<int32_t> eos = {151645, 151643};
  Sampler sampler(kQwenVocab, eos);
  for (bool peaked : {true, false}) {
    const std::vector<float> row = random_row(kQwenVocab, peaked ? 2.0f : 0.3f, peaked, peaked ? 11 : 12);
    const std::vector<float> copy = row;
    const auto best = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    // Prompt and output tokens spread over many blocks, the best token and repeats among them.
    const std::vector<int32_t> prompt = {5, 9, 64, 65, best, 1024, 70000, 151935, 9, 9};
    const std::vector<int32_t> outputs = {best, 12, 12, 151645, 64};
    for (const Case& c : cases(row)) {
      for (uint64_t seed = 1; seed <= 6; ++seed) {
        SCOPED_TRACE(c.name + (peaked ? ", peaked row" : ", flat row") + ", seed " + std::to_string(seed));
        Sequence got_seq = make_seq(prompt, outputs, c.p, seed), want_seq = make_seq(prompt, outputs, c.p, seed);
        const int32_t got = sampler.sample(row.data(), got_seq).token_id;
        const int32_t want = reference_sample(row.data(), kQwenVocab, eos, want_seq);
        EXPECT_EQ(got, want);
        EXPECT_TRUE(got_seq.rng == want_seq.rng) << "one draw per token, none when greedy";
      }
    }
    EXPECT_EQ(row, copy) << "the sampler wrote into the model's row";
  }
}

TEST(SamplerReference, DistributionOverManyBlocksEqualsTheReferences) {
  // 4000 draws with a cut (min_p) whose tokens lie in several blocks: every draw is the
  // reference's, so the empirical distributions agree exactly, and both follow the masses.
  const int64_t V = 10000;
  std::vector<float> row(static_cast<size_t>(V), -30.0f);
  const std::vector<std::pair<int32_t, double>> probs = {{0, 0.1}, {63, 0.2}, {64, 0.05}, {4095, 0.25}, {9999, 0.4}};
  for (auto [t, q] : probs) row[t] = static_cast<float>(std::log(q));
  SamplingParams p;
  p.min_p = 0.01f;
  Sampler sampler(V, {});
  Sequence a = make_seq({1}, {}, p, 77), b = make_seq({1}, {}, p, 77);
  std::vector<int> count(static_cast<size_t>(V), 0);
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    const int32_t t = sampler.sample(row.data(), a).token_id;
    ASSERT_EQ(t, reference_sample(row.data(), V, {}, b)) << "draw " << i;
    ++count[t];
  }
  for (auto [t, q] : probs) EXPECT_NEAR(count[t] / static_cast<double>(n), q, 0.03) << t;
}

TEST(SamplerReference, GreedyArgmaxAtBlockEdgesAndTies) {
  const int64_t V = 3 * Sampler::kMaxBlock + 5;  // a partial last block
  Sampler s(V, {});
  auto greedy = [&](const std::vector<float>& row, SamplingParams q = SamplingParams{}) {
    q.temperature = 0;
    Sequence seq = make_seq({0}, {}, q, 1);
    return s.sample(row.data(), seq).token_id;
  };
  std::vector<float> row(static_cast<size_t>(V), 0.0f);
  row[V - 1] = 2.0f;
  EXPECT_EQ(greedy(row), V - 1) << "in the partial last block";
  row[Sampler::kMaxBlock] = 2.0f;
  EXPECT_EQ(greedy(row), Sampler::kMaxBlock) << "a tie across blocks: the lower id";
  row[Sampler::kMaxBlock - 1] = 2.0f;
  EXPECT_EQ(greedy(row), Sampler::kMaxBlock - 1) << "the last token of a block";
  SamplingParams bias;
  bias.logit_bias = {{static_cast<int32_t>(Sampler::kMaxBlock - 1), -10.0f}, {static_cast<int32_t>(Sampler::kMaxBlock), -10.0f}};
  EXPECT_EQ(greedy(row, bias), V - 1) << "patches lower both block maxima";
  bias.logit_bias = {{3, 50.0f}};
  EXPECT_EQ(greedy(row, bias), 3) << "a patch raises a block's maximum";
  std::vector<float> masked(static_cast<size_t>(V), kNegInf);
  EXPECT_EQ(greedy(masked), 0) << "everything masked: token 0, as a plain argmax";
}

TEST(SamplerReference, LogprobsRankAndTopMatchWholeRowSums) {
  const std::vector<float> row = random_row(kQwenVocab, 2.0f, true, 5);
  double sum = 0;
  const float m = *std::max_element(row.begin(), row.end());
  for (float x : row) sum += std::exp(static_cast<double>(x) - m);
  const double lse = m + std::log(sum);
  std::vector<int32_t> ids(row.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  Sampler sampler(kQwenVocab, {});
  for (int num_top : {0, 1, 5, 20}) {
    SamplingParams p;
    p.logprobs = num_top;
    Sequence seq = make_seq({0}, {}, p, 3);
    const SampleResult r = sampler.sample(row.data(), seq);
    ASSERT_TRUE(r.logprobs);
    EXPECT_NEAR(r.logprobs->logprob, row[r.token_id] - lse, 1e-5);
    const int64_t rank = 1 + std::count_if(row.begin(), row.end(), [&](float x) { return x > row[r.token_id]; });
    EXPECT_EQ(r.logprobs->rank, rank);
    ASSERT_EQ(r.logprobs->top.size(), static_cast<size_t>(num_top));
    for (int k = 0; k < num_top; ++k) {
      EXPECT_EQ(r.logprobs->top[k].token_id, ids[k]) << k;
      EXPECT_NEAR(r.logprobs->top[k].logprob, row[ids[k]] - lse, 1e-5) << k;
    }
  }
}

}  // namespace
}  // namespace vlm::testing
