// The engine on the GPU with Qwen3-VL-MoE (--device cuda, --dtype float32: the exact path) on the
// HF fixture (tests/fixtures/qwen3vl_moe, transformers 5.17; skipped until made): the media encoded
// on the GPU (CudaQwen3VLVisionRunner, DeepStack planes kept on the device), the decoder's MoE
// layers on the GPU's MoE block; each case alone, then all together under prefill chunks of 7 and
// 13 tokens cutting media runs, generate exactly what transformers' generate() did (p<k>.generate).
// The GPU twin of EngineQwen3VLMoe.HfFixtureAloneAndBatchedMatchesGenerate
// (tests/engine/test_engine_qwen3vl_moe.cpp). Skips without a GPU.
#include <gtest/gtest.h>

#include <filesystem>

#include "model/families/qwen3_vl.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/gpu_test.h"
#include "tests/support/qwen3vl_fixture.h"

namespace vlm::testing {
namespace {

std::string moe_dir() { return std::string(VLM_FIXTURES_DIR) + "/qwen3vl_moe/qwen3_vl_moe_tiny"; }

EngineConfig gpu_config(int block_size, int64_t blocks, int budget) {
  EngineConfig c = test_config(block_size, blocks, budget);  // F32 weights and cache
  c.device = Device::Cuda;
  return c;
}

TEST(CudaEngineQwen3VLMoe, HfFixtureAloneAndBatchedMatchesGenerate) {
  VLM_REQUIRE_GPU();
  if (!std::filesystem::exists(moe_dir() + "/reference.safetensors"))
    GTEST_SKIP() << "fixture tests/fixtures/qwen3vl_moe not generated (tools/fixtures/make_qwen3_vl_moe_fixtures.py)";
  const Qwen3VLReference ref = qwen3vl_reference(moe_dir());
  const auto model = Qwen3VLModel::load(moe_dir());  // for building requests
  std::vector<int> ks;
  int64_t items = 0;
  for (int k = 0; k < 8; ++k)
    if (ref.has("p" + std::to_string(k) + ".generate")) {
      ks.push_back(k);
      items += static_cast<int64_t>(qwen3vl_prompt_items(*model, ref, k).items.size());
    }
  ASSERT_EQ(ks, (std::vector<int>{0, 1, 3, 4}));
  auto request = [&](int k) {
    const std::string p = "p" + std::to_string(k);
    GenerationRequest r = greedy_request(p, ref.ints(p + ".ids"), static_cast<int>(ref.ints(p + ".generate").size()));
    Qwen3VLPromptItems pi = qwen3vl_prompt_items(*model, ref, k);
    if (!pi.items.empty()) {
      r.prompt_modalities = pi.prompt.modalities;
      r.images = std::move(pi.items);
    }
    return r;
  };
  auto expect = [&](const std::map<std::string, RequestResult>& results, int k) {
    const std::string p = "p" + std::to_string(k);
    const RequestResult& r = results.at(p);
    ASSERT_TRUE(r.done) << p;
    ASSERT_FALSE(r.error) << p << ": " << r.error->message;
    EXPECT_EQ(r.choices.at(0).tokens, ref.ints(p + ".generate")) << p << " differs from transformers' generate()";
  };
  auto engine_of = [&](const EngineConfig& c) {
    return std::make_unique<Engine>(c, std::unique_ptr<Model>(Qwen3VLModel::load(moe_dir())));
  };
  {
    auto engine = engine_of(gpu_config(16, 64, 512));
    ASSERT_TRUE(engine->backend().encodes_media()) << "media did not go to the GPU encoder";
    for (int k : ks) expect(run_engine(*engine, {{0, request(k)}}), k);
    EXPECT_EQ(engine->runner().num_images_encoded(), items);
  }
  for (int budget : {7, 13}) {
    SCOPED_TRACE("max_num_batched_tokens " + std::to_string(budget));
    auto engine = engine_of(gpu_config(4, 256, budget));
    std::vector<Submission> subs;
    for (size_t i = 0; i < ks.size(); ++i) subs.push_back({static_cast<int>(i % 2), request(ks[i])});
    const auto results = run_engine(*engine, subs);
    for (int k : ks) expect(results, k);
    EXPECT_EQ(engine->runner().num_images_encoded(), items);
  }
}

}  // namespace
}  // namespace vlm::testing
