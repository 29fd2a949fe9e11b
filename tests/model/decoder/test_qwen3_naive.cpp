// Qwen3ForCausalLM on the CPU against a naive double-precision restatement of transformers'
// Qwen3 forward (tests/support/qwen3_naive.h), on a random checkpoint written here: head_dim
// independent of hidden / heads, with and without attention_bias. Whole prompts, chunked prefill
// (the cache holds normed, rotated keys) and two sequences in one step. This stands beside the
// Hugging Face fixtures (qwen3_tiny, qwen3_f32, made by tools/fixtures/make_decoder_fixtures.py on
// the GPU machine).
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <vector>

#include "tests/support/qwen3_naive.h"

namespace vlm::testing {
namespace {

class Qwen3Naive : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(Qwen3Naive, LogitsMatchTheNaiveForwardWholeChunkedAndBatched) {
  Qwen3Shape s;
  s.tied = std::get<0>(GetParam());
  s.bias = std::get<1>(GetParam());
  const Qwen3Checkpoint ck = write_qwen3_checkpoint(
      s, std::string("vlm_qwen3_naive_") + (s.tied ? "t" : "u") + (s.bias ? "b" : "n"), 40 + (s.tied ? 1 : 0) + (s.bias ? 2 : 0));
  std::mt19937 rng(7);
  std::vector<int32_t> a(23), b(9);
  for (auto* v : {&a, &b})
    for (int32_t& x : *v) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(s.V));
  const auto want_a = naive_qwen3_logits(ck, a), want_b = naive_qwen3_logits(ck, b);
  {
    Qwen3Runner ours(ck.dir);
    EXPECT_TRUE(ours.dec->config().qk_norm);
    EXPECT_EQ(ours.dec->config().qkv_bias, s.bias);
    const auto got = ours.run({a}, {1 << 20});
    EXPECT_LE(max_row_rel(got[0], want_a), 1e-5) << "whole prompt";
  }
  {
    Qwen3Runner ours(ck.dir);  // chunks of 5 and 1 in one step: cached keys must be normed and rotated
    const auto got = ours.run({a, b}, {5, 1});
    EXPECT_LE(max_row_rel(got[0], want_a), 1e-5) << "chunked by 5, batched";
    EXPECT_LE(max_row_rel(got[1], want_b), 1e-5) << "one token a step, batched";
  }
  std::filesystem::remove_all(ck.dir);
}

INSTANTIATE_TEST_SUITE_P(TiedAndBias, Qwen3Naive, ::testing::Combine(::testing::Bool(), ::testing::Bool()));

}  // namespace
}  // namespace vlm::testing
