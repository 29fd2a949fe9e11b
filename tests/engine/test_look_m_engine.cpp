// LOOK-M in the engine: off (server default, or a request override) changes nothing bit for
// bit; on, a prompt with media is compacted at the end of prefill, its tail blocks go back to
// the pool (counted), decoding goes on with logical positions, block integrity holds after every
// step, and preempted compressed sequences are recomputed and compressed again.
#include <gtest/gtest.h>

#include <random>

#include "tests/engine/engine_test_util.h"

namespace vlm::testing {
namespace {

constexpr int kPrompt = 160;

GenerationRequest media_request(const std::string& id, uint32_t seed, int max_tokens, int64_t vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> prompt;
  for (int j = 0; j < kPrompt; ++j) prompt.push_back(static_cast<int32_t>(rng() % vocab));
  GenerationRequest r = greedy_request(id, prompt, max_tokens);
  r.prompt_modalities.resize(kPrompt);
  for (int j = 10; j < 74; ++j) r.prompt_modalities[j] = {Modality::Image, 0};
  for (int j = 80; j < 140; ++j) r.prompt_modalities[j] = {Modality::Image, 1};
  r.params.logprobs = 3;
  return r;
}

LookMSetting on() { return {true, {}}; }

TEST(LookMEngine, OffIsBitIdentical) {
  auto base = make_engine("qwen2_tiny", test_config(8, 128, 64));
  EngineConfig c = test_config(8, 128, 64);
  c.look_m = on();  // the server enables it, the requests switch it off
  auto off = make_engine("qwen2_tiny", c);
  std::vector<Submission> a, b;
  for (int i = 0; i < 3; ++i) {
    a.push_back({i, media_request("r" + std::to_string(i), 5 + i, 12, 151936)});
    b.push_back(a.back());
    b.back().request.look_m = LookMSetting{};
  }
  // qwen2_tiny's vocab may be smaller than the id range above: clamp through the engine's own.
  const int64_t V = base->decoder().config().vocab_size;
  for (auto* subs : {&a, &b})
    for (auto& s : *subs)
      for (int32_t& t : s.request.prompt_ids) t = static_cast<int32_t>(t % V);
  auto ra = run_engine(*base, a), rb = run_engine(*off, b);
  for (const auto& [id, r] : ra) {
    ASSERT_FALSE(r.error);
    EXPECT_EQ(r.choices.at(0).tokens, rb.at(id).choices.at(0).tokens) << id;
    ASSERT_EQ(r.choices.at(0).logprobs.size(), rb.at(id).choices.at(0).logprobs.size());
    for (size_t i = 0; i < r.choices.at(0).logprobs.size(); ++i)
      EXPECT_EQ(r.choices.at(0).logprobs[i].logprob, rb.at(id).choices.at(0).logprobs[i].logprob);
  }
  EXPECT_EQ(off->stats().num_look_m_compressions, 0);
}

TEST(LookMEngine, CompressesFreesBlocksAndKeepsDecoding) {
  EngineConfig c = test_config(8, 128, 64);  // prefill chunks of <= 64 tokens
  c.look_m = on();
  auto engine = make_engine("qwen2_tiny", c);
  const int64_t V = engine->decoder().config().vocab_size;
  GenerationRequest text_only = greedy_request("text", std::vector<int32_t>(kPrompt, 3), 5);
  auto ch = std::make_shared<RequestChannel>();
  engine->add_request(media_request("media", 1, 20, V), ch);
  // Step through prefill: 160 tokens in chunks of 64 -> the third step finishes it.
  for (int i = 0; i < 2; ++i) engine->step();
  EXPECT_EQ(engine->block_manager().num_used_blocks(), 16);  // 128 tokens of 8
  engine->step();
  const int kept = look_m_budget(c.look_m.params, kPrompt).kept();  // 16 + 16
  EXPECT_EQ(kept, 32);
  EXPECT_EQ(engine->stats().num_look_m_compressions, 1);
  EXPECT_EQ(engine->stats().look_m_kv_tokens_before, kPrompt);
  EXPECT_EQ(engine->stats().look_m_kv_tokens_after, kept);
  EXPECT_EQ(engine->stats().look_m_kv_blocks_freed, kPrompt / 8 - kept / 8);
  // Freed bytes: the freed blocks' K and V in every layer, f32 cache (test_config).
  const ModelConfig& mc = engine->decoder().config();
  const int64_t block_bytes = 2 * mc.num_layers * mc.num_kv_heads * 8 * mc.head_dim * int64_t(sizeof(float));
  EXPECT_EQ(engine->stats().look_m_kv_bytes_freed, (kPrompt / 8 - kept / 8) * block_bytes);
  EXPECT_EQ(engine->block_manager().num_used_blocks(), kept / 8);
  RequestResult res;
  while (engine->has_unfinished()) engine->step();
  collect(*ch, res);
  ASSERT_TRUE(res.done);
  ASSERT_FALSE(res.error);
  EXPECT_EQ(res.choices.at(0).tokens.size(), 20u);
  EXPECT_EQ(res.usage->prompt_tokens, kPrompt);  // usage counts logical tokens
  EXPECT_EQ(res.usage->look_m_kv_tokens_before, kPrompt);
  EXPECT_EQ(res.usage->look_m_kv_tokens_kept, kept);
  EXPECT_TRUE(engine->check_idle());
  // A text-only prompt is left alone unless text_only_prompts is set.
  const auto plain = run_engine(*engine, {{0, text_only}});
  EXPECT_EQ(engine->stats().num_look_m_compressions, 1);
  EXPECT_EQ(plain.at("text").usage->look_m_kv_tokens_before, 0);  // not compressed: not reported
  text_only.id = "text2";
  text_only.look_m = on();
  text_only.look_m->params.text_only_prompts = true;
  run_engine(*engine, {{0, text_only}});
  EXPECT_EQ(engine->stats().num_look_m_compressions, 2);
}

TEST(LookMEngine, PreemptionRecomputesAndCompressesAgain) {
  EngineConfig c = test_config(8, 40, 64);  // 320 slots: two 160-token prefills do not fit with decodes
  c.max_model_len = 200;
  c.look_m = on();
  auto engine = make_engine("qwen2_tiny", c);
  const int64_t V = engine->decoder().config().vocab_size;
  std::vector<Submission> subs;
  for (int i = 0; i < 6; ++i) {
    subs.push_back({i, media_request("r" + std::to_string(i), 20 + i, 30, V)});
    if (i % 3 == 2) subs.back().request.params.n = 2;  // forks share the compressed prompt
  }
  auto results = run_engine(*engine, subs);
  for (const auto& [id, r] : results) {
    ASSERT_TRUE(r.done) << id;
    ASSERT_FALSE(r.error) << id << ": " << r.error->message;
    for (const auto& [i, ch] : r.choices) EXPECT_EQ(ch.tokens.size(), 30u) << id << "/" << i;
  }
  EXPECT_GT(engine->stats().num_preemptions, 0);
  EXPECT_GE(engine->stats().num_look_m_compressions, 6);
  RecordProperty("preemptions", std::to_string(engine->stats().num_preemptions));
  RecordProperty("compressions", std::to_string(engine->stats().num_look_m_compressions));
}

}  // namespace
}  // namespace vlm::testing
