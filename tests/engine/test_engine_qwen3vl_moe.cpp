// The engine on Qwen3-VL-MoE: several sequences' rows through the mixture-of-experts layers in one
// step, prefill chunks of 7 and 13 tokens cutting media runs.
//  - A checkpoint made from the dense Qwen3-VL fixture with random experts (8, top 2, stored as
//    released, fused [E, C, 2I]; tests/support/qwen3vl_moe_checkpoint.h): the fixture's text, image,
//    video and mixed prompts, alone and batched, generate what the model generates alone
//    (testing::qwen3vl_run, one sequence, whole prompt).
//  - The HF fixture (tests/fixtures/qwen3vl_moe, tools/fixtures/make_qwen3_vl_moe_fixtures.py;
//    skipped until made): alone and batched, what transformers' generate() did.
#include <gtest/gtest.h>

#include <filesystem>

#include "model/families/qwen3_vl.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/qwen3vl_fixture.h"
#include "tests/support/qwen3vl_moe_checkpoint.h"

namespace vlm::testing {
namespace {

constexpr int kTokens = 8;

GenerationRequest request(const Qwen3VLModel& model, const Qwen3VLReference& ref, int k) {
  const std::string p = "p" + std::to_string(k);
  GenerationRequest r = greedy_request(p, ref.ints(p + ".ids"), kTokens);
  Qwen3VLPromptItems pi = qwen3vl_prompt_items(model, ref, k);
  if (!pi.items.empty()) {
    r.prompt_modalities = pi.prompt.modalities;
    r.images = std::move(pi.items);
  }
  return r;
}

// Cases `ks` of `ref` through an engine over the checkpoint in `dir`: each alone, then all
// together under budgets of 7 and 13 tokens; every result must be want[k].
void expect_engine(const std::string& dir, const Qwen3VLReference& ref, const std::vector<int>& ks,
                   const std::map<int, std::vector<int32_t>>& want) {
  const auto model = Qwen3VLModel::load(dir);  // for building requests
  auto engine_of = [&](const EngineConfig& c) {
    return std::make_unique<Engine>(c, std::unique_ptr<Model>(Qwen3VLModel::load(dir)));
  };
  auto expect = [&](const std::map<std::string, RequestResult>& results, int k) {
    const std::string p = "p" + std::to_string(k);
    const RequestResult& r = results.at(p);
    ASSERT_TRUE(r.done) << p;
    ASSERT_FALSE(r.error) << p << ": " << r.error->message;
    EXPECT_EQ(r.choices.at(0).tokens, want.at(k)) << p;
  };
  {
    auto engine = engine_of(test_config(16, 64, 512));
    for (int k : ks) expect(run_engine(*engine, {{0, request(*model, ref, k)}}), k);
  }
  for (int budget : {7, 13}) {
    SCOPED_TRACE("max_num_batched_tokens " + std::to_string(budget));
    auto engine = engine_of(test_config(4, 256, budget));
    std::vector<Submission> subs;
    for (size_t i = 0; i < ks.size(); ++i) subs.push_back({static_cast<int>(i % 2), request(*model, ref, ks[i])});
    const auto results = run_engine(*engine, subs);
    for (int k : ks) expect(results, k);
  }
}

TEST(EngineQwen3VLMoe, RandomExpertsBatchedAndChunkedGenerateAsAlone) {
  if (!qwen3vl_fixture_present()) GTEST_SKIP() << "fixture tests/fixtures/qwen3vl not present";
  MoeCheckpointSpec spec;
  spec.identical = false;
  spec.layout = ExpertLayout::FusedTransposed;
  const MoeCheckpoint ck(spec, "engine");
  const auto model = Qwen3VLModel::load(ck.dir());
  const Qwen3VLReference ref = qwen3vl_reference();
  const std::vector<int> ks = {0, 1, 3, 4};
  std::map<int, std::vector<int32_t>> want;
  for (int k : ks) {
    std::vector<float> rows;
    want[k] = qwen3vl_run(*model, ref, k, 1000, kTokens, rows);
  }
  expect_engine(ck.dir(), ref, ks, want);
}

TEST(EngineQwen3VLMoe, HfFixtureAloneAndBatchedMatchesGenerate) {
  const std::string dir = std::string(VLM_FIXTURES_DIR) + "/qwen3vl_moe/qwen3_vl_moe_tiny";
  if (!std::filesystem::exists(dir + "/reference.safetensors"))
    GTEST_SKIP() << "fixture tests/fixtures/qwen3vl_moe not generated (tools/fixtures/make_qwen3_vl_moe_fixtures.py)";
  const Qwen3VLReference ref = qwen3vl_reference(dir);
  std::vector<int> ks;
  std::map<int, std::vector<int32_t>> want;
  for (int k = 0; k < 8; ++k) {
    const std::string p = "p" + std::to_string(k) + ".generate";
    if (!ref.has(p)) continue;
    ks.push_back(k);
    want[k] = ref.ints(p);
    ASSERT_EQ(want[k].size(), static_cast<size_t>(kTokens));
  }
  ASSERT_FALSE(ks.empty());
  expect_engine(dir, ref, ks, want);
}

}  // namespace
}  // namespace vlm::testing
