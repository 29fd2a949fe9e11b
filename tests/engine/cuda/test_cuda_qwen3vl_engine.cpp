// The engine on the GPU with Qwen3-VL (--device cuda; tests/fixtures/qwen3vl: the tiny model made
// with transformers 5.17): the fixture's cases (text, one image, two images, a video of two
// temporal groups, image + video + image, a video file) encode their media on the GPU
// (CudaMediaEncoder -> CudaQwen3VLVisionRunner; each row's merger plane and DeepStack planes stay
// on the device) and the decoder adds the DeepStack planes after its first K layers
// (CudaRowOps::add_override_plane), generating exactly Hugging Face's greedy tokens
// (reference p<k>.greedy) on the exact path (--dtype float32): each case alone, and all together
// with a text request under prefill chunks of 7 and 13 tokens that cut through media runs (a
// chunk's media rows carry their planes). The GPU twin of tests/engine/test_engine_qwen3vl.cpp.
// And the CUDA backend's form: each case's media made from the fixture's raw frames as Frames8
// items (qwen3vl_frames8_items: the rows made on the GPU by CudaFramePreprocessor) generate the
// same greedy tokens and top-5 logprobs as the same items in the Rows form (rows made on the
// host), whole and under 7-token chunks.
// Skips without a GPU or without the fixture.
#include <gtest/gtest.h>

#include "model/families/qwen3_vl.h"
#include "model/media/qwen2vl_frames.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/gpu_test.h"
#include "tests/support/qwen3vl_fixture.h"

namespace vlm::testing {
namespace {

EngineConfig gpu_config(int block_size, int64_t blocks, int budget) {
  EngineConfig c = test_config(block_size, blocks, budget);  // F32 weights and cache: the exact path
  c.device = Device::Cuda;
  return c;
}

std::unique_ptr<Engine> qwen3vl_gpu_engine(const EngineConfig& c) {
  return std::make_unique<Engine>(c, std::unique_ptr<Model>(Qwen3VLModel::load(qwen3vl_model_dir())));
}

GenerationRequest request(const Qwen3VLModel& model, const Qwen3VLReference& ref, int k) {
  const std::string p = "p" + std::to_string(k);
  GenerationRequest r = greedy_request(p, ref.ints(p + ".ids"), static_cast<int>(ref.ints(p + ".greedy").size()));
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
  EXPECT_EQ(r.choices.at(0).tokens, ref.ints(p + ".greedy")) << p << " differs from Hugging Face";
}

class CudaEngineQwen3VL : public ::testing::Test {
 protected:
  void SetUp() override {
    VLM_REQUIRE_GPU();
    if (!qwen3vl_fixture_present()) GTEST_SKIP() << "fixture tests/fixtures/qwen3vl not generated";
    model_ = Qwen3VLModel::load(qwen3vl_model_dir());
    ref_ = std::make_unique<Qwen3VLReference>(qwen3vl_reference());
    while (ref_->has("p" + std::to_string(cases_) + ".ids")) ++cases_;
    ASSERT_EQ(cases_, 6);
    for (int k = 0; k < cases_; ++k) items_ += static_cast<int64_t>(qwen3vl_prompt_items(*model_, *ref_, k).items.size());
  }
  int cases_ = 0;
  int64_t items_ = 0;  // media items of all cases (videos as their temporal groups)
  std::unique_ptr<Qwen3VLModel> model_;
  std::unique_ptr<Qwen3VLReference> ref_;
};

TEST_F(CudaEngineQwen3VL, EachCaseAloneMatchesHfGreedy) {
  auto engine = qwen3vl_gpu_engine(gpu_config(16, 64, 512));
  ASSERT_TRUE(engine->backend().encodes_media()) << "media did not go to the GPU encoder";
  for (int k = 0; k < cases_; ++k) expect_hf(run_engine(*engine, {{0, request(*model_, *ref_, k)}}), *ref_, k);
  EXPECT_EQ(engine->runner().num_images_encoded(), items_);
}

TEST_F(CudaEngineQwen3VL, BatchedUnderChunksCuttingMediaRuns) {
  const GenerationRequest text = greedy_request("text", {2001, 872, 198, 970, 11, 1879, 0, 2002, 198}, 8);
  std::vector<int32_t> text_alone;
  {
    auto engine = qwen3vl_gpu_engine(gpu_config(16, 64, 512));
    text_alone = run_engine(*engine, {{0, text}}).at("text").choices.at(0).tokens;
  }
  for (int budget : {7, 13}) {
    SCOPED_TRACE("max_num_batched_tokens " + std::to_string(budget));
    auto engine = qwen3vl_gpu_engine(gpu_config(4, 256, budget));
    std::vector<Submission> subs;
    for (int k = 0; k < cases_; ++k) subs.push_back({k % 3, request(*model_, *ref_, k)});
    subs.push_back({2, text});
    const auto results = run_engine(*engine, subs);
    for (int k = 0; k < cases_; ++k) expect_hf(results, *ref_, k);
    EXPECT_EQ(results.at("text").choices.at(0).tokens, text_alone);
    EXPECT_EQ(engine->runner().num_images_encoded(), items_);  // each item once, however chunked
  }
}

// The same case with its media as Frames8 items and as their Rows form: the same tokens and logprobs.
TEST_F(CudaEngineQwen3VL, Frames8ItemsMatchTheRowsPath) {
  for (int budget : {512, 7}) {
    int media_cases = 0;
    for (int k = 0; k < cases_; ++k) {
      Qwen3VLPromptItems pi = qwen3vl_frames8_items(*model_, *ref_, k);
      if (pi.items.empty()) continue;
      ++media_cases;
      SCOPED_TRACE("p" + std::to_string(k) + " max_num_batched_tokens " + std::to_string(budget));
      const std::string p = "p" + std::to_string(k);
      std::map<std::string, RequestResult> got[2];
      for (int form = 0; form < 2; ++form) {  // 0: Frames8, 1: Rows
        GenerationRequest r = greedy_request(p, ref_->ints(p + ".ids"), static_cast<int>(ref_->ints(p + ".greedy").size()));
        r.params.logprobs = 5;
        r.prompt_modalities = pi.prompt.modalities;
        for (const MediaPixels& m : pi.items) {
          ASSERT_TRUE(m.is_frames8());
          r.images.push_back(form == 0 ? m : to_rows_form(m));
        }
        auto engine = qwen3vl_gpu_engine(gpu_config(4, 256, budget));
        got[form] = run_engine(*engine, {{0, r}});
        EXPECT_EQ(engine->runner().num_images_encoded(), static_cast<int64_t>(pi.items.size()));
      }
      const RequestResult &a = got[0].at(p), &b = got[1].at(p);
      ASSERT_TRUE(a.done && b.done);
      ASSERT_FALSE(a.error) << a.error->message;
      ASSERT_FALSE(b.error) << b.error->message;
      EXPECT_EQ(a.choices.at(0).tokens, b.choices.at(0).tokens);
      const auto &la = a.choices.at(0).logprobs, &lb = b.choices.at(0).logprobs;
      ASSERT_EQ(la.size(), lb.size());
      for (size_t i = 0; i < la.size(); ++i) {
        EXPECT_NEAR(la[i].logprob, lb[i].logprob, 1e-5) << "token " << i;
        ASSERT_EQ(la[i].top.size(), lb[i].top.size());
        for (size_t j = 0; j < la[i].top.size(); ++j) {
          EXPECT_EQ(la[i].top[j].token_id, lb[i].top[j].token_id) << "token " << i << " top " << j;
          EXPECT_NEAR(la[i].top[j].logprob, lb[i].top[j].logprob, 1e-5) << "token " << i << " top " << j;
        }
      }
    }
    EXPECT_GE(media_cases, 4);
  }
}

}  // namespace
}  // namespace vlm::testing
