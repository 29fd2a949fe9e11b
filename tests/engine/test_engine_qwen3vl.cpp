// The engine on Qwen3-VL (tests/fixtures/qwen3vl: the tiny model made with transformers 5.17):
// the five cases (text, one image, two images, a video of two temporal groups with their
// timestamps between them, image + video + image) as HF's ids and pixel rows, each video split
// into its temporal groups (Qwen3VLModel::split_video), generate exactly what generate() did —
// alone, and all together with a text request under prefill chunks of 7 and 13 tokens that start
// and end inside media runs (the override rows carry their DeepStack planes).
#include <gtest/gtest.h>

#include "model/families/qwen3_vl.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/qwen3vl_fixture.h"

namespace vlm::testing {
namespace {

std::unique_ptr<Engine> qwen3vl_engine(const EngineConfig& c) {
  return std::make_unique<Engine>(c, std::unique_ptr<Model>(Qwen3VLModel::load(qwen3vl_model_dir())));
}

GenerationRequest request(const Qwen3VLModel& model, const Qwen3VLReference& ref, int k) {
  const std::string p = "p" + std::to_string(k);
  GenerationRequest r = greedy_request(p, ref.ints(p + ".ids"), static_cast<int>(ref.ints(p + ".generate").size()));
  Qwen3VLPromptItems pi = qwen3vl_prompt_items(model, ref, k);
  if (!pi.items.empty()) {
    r.prompt_modalities = pi.prompt.modalities;
    r.images = std::move(pi.items);
  }
  return r;
}

void expect_hf(const std::map<std::string, RequestResult>& results, const Qwen3VLReference& ref, int k) {
  const std::string p = "p" + std::to_string(k);
  const RequestResult& r = results.at(p);
  ASSERT_TRUE(r.done) << p;
  ASSERT_FALSE(r.error) << p << ": " << r.error->message;
  EXPECT_EQ(r.choices.at(0).tokens, ref.ints(p + ".generate")) << p << " differs from Hugging Face";
  ASSERT_TRUE(r.usage);
  EXPECT_EQ(r.usage->prompt_tokens, static_cast<int64_t>(ref.ints(p + ".ids").size())) << p;
}

class EngineQwen3VL : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!qwen3vl_fixture_present()) GTEST_SKIP() << "fixture tests/fixtures/qwen3vl not generated";
    model_ = Qwen3VLModel::load(qwen3vl_model_dir());
    ref_ = std::make_unique<Qwen3VLReference>(qwen3vl_reference());
    while (ref_->has("p" + std::to_string(cases_) + ".ids")) ++cases_;
    ASSERT_GE(cases_, 5);
    for (int k = 0; k < cases_; ++k) items_ += static_cast<int64_t>(qwen3vl_prompt_items(*model_, *ref_, k).items.size());
  }
  int cases_ = 0;         // 5, or 6 with the video-file case
  int64_t items_ = 0;     // media items of all cases (videos as their temporal groups)
  std::unique_ptr<Qwen3VLModel> model_;  // for building requests
  std::unique_ptr<Qwen3VLReference> ref_;
};

TEST_F(EngineQwen3VL, EachCaseAloneMatchesHfGenerate) {
  auto engine = qwen3vl_engine(test_config(16, 64, 512));
  for (int k = 0; k < cases_; ++k) expect_hf(run_engine(*engine, {{0, request(*model_, *ref_, k)}}), *ref_, k);
  EXPECT_EQ(engine->runner().num_images_encoded(), items_);  // 1 + 2 + 2 + 4 for the first five
}

TEST_F(EngineQwen3VL, BatchedUnderChunksCuttingMediaRuns) {
  std::vector<int32_t> text_alone;
  const GenerationRequest text = greedy_request("text", {2001, 872, 198, 970, 11, 1879, 0, 2002, 198}, 8);
  {
    auto engine = qwen3vl_engine(test_config(16, 64, 512));
    text_alone = run_engine(*engine, {{0, text}}).at("text").choices.at(0).tokens;
  }
  for (int budget : {7, 13}) {
    SCOPED_TRACE("max_num_batched_tokens " + std::to_string(budget));
    auto engine = qwen3vl_engine(test_config(4, 256, budget));
    std::vector<Submission> subs;
    for (int k = 0; k < cases_; ++k) subs.push_back({k % 3, request(*model_, *ref_, k)});
    subs.push_back({2, text});
    const auto results = run_engine(*engine, subs);
    for (int k = 0; k < cases_; ++k) expect_hf(results, *ref_, k);
    EXPECT_EQ(results.at("text").choices.at(0).tokens, text_alone);
    EXPECT_EQ(engine->runner().num_images_encoded(), items_);  // each item once, however chunked
  }
}

}  // namespace
}  // namespace vlm::testing
