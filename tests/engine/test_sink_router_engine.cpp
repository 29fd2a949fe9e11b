// SinkRouter through the engine: off (the default) the engine's outputs are the exact path's
// (the Hugging Face greedy tokens) and nothing is routed; per-request on/off overrides the
// engine default; routed decode rows are counted in EngineStats (groups routed / skipped, KV
// bytes not read); forked choices (n > 1) inherit their parent's anchors.
#include <gtest/gtest.h>

#include "tests/engine/engine_test_util.h"

namespace vlm::testing {
namespace {

const char* kModel = "qwen2_tiny";  // 3 layers: layer 2 is routed with the paged default

std::vector<Submission> reference_requests(std::optional<bool> sink, int n = 1) {
  const Reference ref = load_reference(kModel);
  std::vector<Submission> subs;
  for (int p = 0; p < ref.num_prompts(); ++p) {
    GenerationRequest r = greedy_request("p" + std::to_string(p), ref.ids(p), static_cast<int>(ref.greedy(p).size()));
    r.params.sink_router = sink;
    r.params.n = n;
    subs.push_back({p, r});
  }
  return subs;
}

TEST(SinkRouterEngine, OffByDefaultIsTheExactPath) {
  const Reference ref = load_reference(kModel);
  auto engine = make_engine(kModel, test_config());
  const auto results = run_engine(*engine, reference_requests(std::nullopt));
  for (int p = 0; p < ref.num_prompts(); ++p)
    EXPECT_EQ(results.at("p" + std::to_string(p)).choices.at(0).tokens, ref.greedy(p)) << p;
  EXPECT_EQ(engine->stats().sink_groups_routed, 0);
  EXPECT_EQ(engine->stats().sink_groups_skipped, 0);
}

TEST(SinkRouterEngine, PerRequestOnWithUnreachableThresholdKeepsTheTokens) {
  const Reference ref = load_reference(kModel);
  EngineConfig c = test_config();
  c.sink_router_config.c0 = 2.0;  // tau clamps to 1.01: never skips, but every decode row is routed
  c.sink_router_config.num_dense_layers = 0;
  auto engine = make_engine(kModel, c);
  const auto results = run_engine(*engine, reference_requests(true));
  int64_t decode_rows = 0;
  for (int p = 0; p < ref.num_prompts(); ++p) {
    EXPECT_EQ(results.at("p" + std::to_string(p)).choices.at(0).tokens, ref.greedy(p)) << p;
    decode_rows += static_cast<int64_t>(ref.greedy(p).size()) - 1;  // the first token comes from prefill
  }
  const ModelConfig mc = LlmDecoder::load(fixture_model_dir(kModel))->config();  // a copy: the decoder is a temporary
  EXPECT_EQ(engine->stats().sink_groups_routed, decode_rows * mc.num_layers * mc.num_kv_heads);
  EXPECT_EQ(engine->stats().sink_groups_skipped, 0);
  EXPECT_EQ(engine->stats().sink_kv_bytes_skipped, 0);
}

TEST(SinkRouterEngine, ServerDefaultOnSkipsAndRequestOffOptsOut) {
  EngineConfig c = test_config();
  c.sink_router = true;
  c.sink_router_config.c0 = -2.0;  // every group of the routed layer (layer 2) is a sink group
  {
    auto engine = make_engine(kModel, c);
    run_engine(*engine, reference_requests(false));  // every request opts out
    EXPECT_EQ(engine->stats().sink_groups_routed, 0);
  }
  auto engine = make_engine(kModel, c);
  const auto results = run_engine(*engine, reference_requests(std::nullopt, /*n=*/2));
  const EngineStats& st = engine->stats();
  EXPECT_GT(st.sink_groups_routed, 0);
  EXPECT_EQ(st.sink_groups_skipped, st.sink_groups_routed);
  EXPECT_GT(st.sink_kv_bytes_skipped, 0);
  // Both choices of every request decode routed (the fork copied the anchors): rows x 1 routed
  // layer x Hkv groups, summed over both choices.
  const Reference ref = load_reference(kModel);
  const ModelConfig mc = LlmDecoder::load(fixture_model_dir(kModel))->config();  // a copy: the decoder is a temporary
  int64_t rows = 0;
  for (int p = 0; p < ref.num_prompts(); ++p) {
    const RequestResult& r = results.at("p" + std::to_string(p));
    ASSERT_EQ(r.choices.size(), 2u);
    for (const auto& [i, ch] : r.choices) rows += static_cast<int64_t>(ch.tokens.size()) - 1;
  }
  EXPECT_EQ(st.sink_groups_routed, rows * (mc.num_layers - 2) * mc.num_kv_heads);
}

}  // namespace
}  // namespace vlm::testing
