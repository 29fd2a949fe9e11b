// The prefill-only step budget on the GPU (issue 38; SchedulerConfig::prefill_only_batched_tokens):
// a 3,000-token prompt alone under --max-num-batched-tokens 1024 is prefilled in 3 chunks with the
// rule off (the later ones over cached context: cuDNN's paged mode in bf16) and in one 3,000-row
// step with it on (cuDNN's first-chunk mode; the decoder's step activations reserved at start for
// 4,096 rows, not grown after the KV cache took the memory). The first token's top-20 logprobs
// agree (f32, the exact path: to 1e-4; bf16: to 3e-2, the GEMMs' row blocking and rounding differ
// between a 1,024-row and a 3,000-row step), and so do the greedy tokens of the f32 run. A short
// request decoding beside it holds that step to 1,024 tokens; auto resolves to the GPU's
// kCudaPrefillOnlyBatchedTokens. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tests/engine/engine_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

struct PrefillRun {
  RequestResult result;
  int64_t max_prefill_only_step = 0;  // tokens of the largest step without a decode
  int64_t max_decode_step = 0;        // ... with one
  int64_t steps = 0;
};

PrefillRun run_prompt(DType dt, int prefill_only, bool with_short) {
  EngineConfig c = test_config(16, 512, 1024);
  c.device = Device::Cuda;
  c.dtype = dt;
  c.kv_dtype = dt;
  c.max_model_len = 4096;  // beyond the fixture's 512 positions: RoPE extends, the comparison is like for like
  c.scheduler.prefill_only_batched_tokens = prefill_only;
  auto engine = make_engine("qwen2_tiny", c);
  std::vector<int32_t> prompt;
  uint32_t lcg = 7;
  for (int i = 0; i < 3000; ++i) {
    lcg = lcg * 1664525u + 1013904223u;
    prompt.push_back(static_cast<int32_t>((lcg >> 8) % 384));  // qwen2_tiny's vocabulary
  }
  GenerationRequest longp = greedy_request("long", prompt, 4);
  longp.params.logprobs = 20;
  PrefillRun r;
  std::map<std::string, std::shared_ptr<RequestChannel>> channels;
  std::map<std::string, RequestResult> results;
  auto add = [&](const GenerationRequest& req) {
    auto ch = std::make_shared<RequestChannel>();
    channels[req.id] = ch;
    engine->add_request(req, ch);
  };
  auto step = [&] {
    engine->step();
    ++r.steps;
    const EngineStats& st = engine->stats();
    int64_t& m = st.last_step_num_decode_seqs > 0 ? r.max_decode_step : r.max_prefill_only_step;
    m = std::max(m, st.last_step_num_tokens);
    for (auto& [id, ch] : channels) collect(*ch, results[id]);
  };
  if (with_short) {  // its prompt first (step 1), then its second token beside the long prompt's first chunk
    add(greedy_request("short", {11, 22, 33, 44}, 2));
    step();
  }
  add(longp);
  while (engine->has_unfinished() && r.steps < 200) step();
  EXPECT_FALSE(engine->has_unfinished());
  EXPECT_EQ(engine->block_manager().num_used_blocks(), 0);
  r.result = results.at("long");
  EXPECT_TRUE(r.result.done);
  EXPECT_FALSE(r.result.error) << r.result.error->message;
  return r;
}

// Largest |difference| of the first token's top logprobs (matched by token id; a token in one list
// and not the other fails).
double first_token_diff(const RequestResult& a, const RequestResult& b) {
  const auto &x = a.choices.at(0).logprobs.at(0).top, &y = b.choices.at(0).logprobs.at(0).top;
  EXPECT_EQ(x.size(), y.size());
  double worst = 0;
  for (const TopLogprob& t : x) {
    auto it = std::find_if(y.begin(), y.end(), [&](const TopLogprob& u) { return u.token_id == t.token_id; });
    if (it == y.end()) {
      // The 20th entries may swap on a tie-close logprob; only a miss above the list's tail counts.
      if (t.logprob > x.back().logprob + 1e-2) ADD_FAILURE() << "token " << t.token_id << " missing";
      continue;
    }
    worst = std::max(worst, std::fabs(static_cast<double>(t.logprob) - it->logprob));
  }
  return worst;
}

class CudaPrefillOnly : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { VLM_REQUIRE_GPU(); }
};

TEST_P(CudaPrefillOnly, OneBigChunkMatchesThreeChunks) {
  const DType dt = GetParam();
  const PrefillRun off = run_prompt(dt, 0, false), on = run_prompt(dt, 4096, false);
  EXPECT_EQ(off.max_prefill_only_step, 1024);
  EXPECT_EQ(on.max_prefill_only_step, 3000);
  EXPECT_EQ(off.steps, on.steps + 2);  // 3 prefill steps against 1
  const double diff = first_token_diff(off.result, on.result);
  std::printf("[prefill-only] %s: first token's top-20 logprobs, worst |off - on| %.3g\n", dtype_name(dt), diff);
  EXPECT_LE(diff, dt == DType::F32 ? 1e-4 : 3e-2);
  if (dt == DType::F32) {
    EXPECT_EQ(off.result.choices.at(0).tokens, on.result.choices.at(0).tokens);
  }
}

TEST_P(CudaPrefillOnly, AutoIsTheGpuDefaultAndADecodeKeepsTheBudget) {
  const DType dt = GetParam();
  const PrefillRun on = run_prompt(dt, kPrefillOnlyTokensAuto, true);  // auto: kCudaPrefillOnlyBatchedTokens (8192)
  // Step 2: the short request's decode and the long prompt's first chunk, 1 + 1023 tokens; step 3
  // (the short one done): the long prompt's other 1977 in one step.
  EXPECT_EQ(on.max_decode_step, 1024) << "a step with a decode in it keeps --max-num-batched-tokens";
  EXPECT_EQ(on.max_prefill_only_step, 1977);
  const PrefillRun off = run_prompt(dt, 0, true);
  const double diff = first_token_diff(off.result, on.result);
  std::printf("[prefill-only] %s beside a decode: worst |off - on| %.3g\n", dtype_name(dt), diff);
  EXPECT_LE(diff, dt == DType::F32 ? 1e-4 : 3e-2);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaPrefillOnly, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace vlm::testing
