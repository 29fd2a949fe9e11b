// LLaVA-OneVision through the engine on the GPU (--device cuda, exact path --dtype float32): the
// GPU fixture's recorded chats (tests/fixtures/llava_onevision_gpu, ov_gpu; HF's input_ids, the
// PNG media preprocessed as the server's loader does) encode their media on the GPU
// (CudaMediaEncoder -> CudaOnevisionVisionRunner; the rows go to the decoder's input embeddings on
// the device) and generate exactly transformers 5.17's greedy tokens, with the sampled tokens'
// logprobs and the top-5 within 5e-4 of HF f32's (cases.json top_logprobs; values near -8; the CPU
// engine, CpuEngineOnevisionGpuFixture below, is within 4e-6): each
// chat alone, and all together under prefill chunks of 13 tokens that cut image and video runs.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>

#include "model/families/llava_onevision.h"
#include "model/families/multimodal_input.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/gpu_test.h"
#include "tests/support/onevision_fixture.h"

namespace vlm::testing {
namespace {

EngineConfig ov_gpu_config(int block_size, int64_t blocks, int budget) {
  EngineConfig c = test_config(block_size, blocks, budget);
  c.device = Device::Cuda;
  return c;
}

std::unique_ptr<Engine> ov_gpu_engine(const EngineConfig& c) {
  return std::make_unique<Engine>(c, std::unique_ptr<Model>(LlavaOnevisionModel::load(onevision_gpu_model_dir())));
}

// The chat's request: HF's input_ids tagged by the model's token counts, its media, greedy with
// the top-5 logprobs.
GenerationRequest ov_request(const Model& model, const OnevisionCase& c) {
  const std::vector<int32_t> ids = c.hf["input_ids"];
  GenerationRequest r = greedy_request(c.hf["name"], ids, static_cast<int>(c.hf["generated_ids"].size()));
  std::vector<MediaTokens> mt;
  for (size_t k = 0; k < c.items.size(); ++k)
    mt.push_back({c.items[k].modality, model.media_tokens(c.items[k], static_cast<int>(k)),
                  model.tokens_per_frame(c.items[k])});
  const MultimodalPrompt p = expand_media_tokens(ids, model.image_token_id(), model.video_token_id(), mt);
  EXPECT_EQ(p.token_ids, ids) << c.hf["name"];
  r.prompt_modalities = p.modalities;
  r.images = c.items;
  r.params.logprobs = 5;
  return r;
}

void expect_hf(const std::map<std::string, RequestResult>& results, const OnevisionCase& c) {
  const std::string id = c.hf["name"];
  const RequestResult& r = results.at(id);
  ASSERT_TRUE(r.done) << id;
  ASSERT_FALSE(r.error) << id << ": " << r.error->message;
  const ChoiceResult& ch = r.choices.at(0);
  EXPECT_EQ(ch.tokens, c.hf["generated_ids"].get<std::vector<int32_t>>())
      << id << " differs from Hugging Face (min margin " << c.hf["min_margin"] << ")";
  const auto& tops = c.hf["top_logprobs"];  // [step][rank] = [id, logprob]
  ASSERT_EQ(ch.logprobs.size(), tops.size()) << id;
  double worst = 0;
  for (size_t i = 0; i < tops.size(); ++i) {
    EXPECT_EQ(ch.logprobs[i].token_id, tops[i][0][0].get<int32_t>()) << id << " step " << i;
    worst = std::max(worst, std::fabs(double(ch.logprobs[i].logprob) - tops[i][0][1].get<double>()));
    for (const TopLogprob& t : ch.logprobs[i].top)
      for (const auto& h : tops[i])
        if (h[0].get<int32_t>() == t.token_id) worst = std::max(worst, std::fabs(double(t.logprob) - h[1].get<double>()));
  }
  EXPECT_LE(worst, 5e-4) << id << ": logprobs against HF f32";
  std::printf("[ engine ] ov_gpu %-10s greedy %s, logprobs within %.2e of HF f32\n", id.c_str(),
              ch.tokens == c.hf["generated_ids"].get<std::vector<int32_t>>() ? "equal" : "DIFFERENT", worst);
}

class CudaEngineOnevision : public ::testing::Test {
 protected:
  void SetUp() override { VLM_REQUIRE_GPU(); }
};

TEST_F(CudaEngineOnevision, EachChatAloneMatchesHf) {
  auto engine = ov_gpu_engine(ov_gpu_config(16, 128, 512));
  ASSERT_TRUE(engine->backend().encodes_media()) << "OneVision media did not go to the GPU encoder";
  const std::vector<OnevisionCase> cases = onevision_recorded_cases(onevision_gpu_root(), onevision_gpu_model_dir());
  ASSERT_EQ(cases.size(), 9u);
  int64_t items = 0;
  for (const OnevisionCase& c : cases) {
    expect_hf(run_engine(*engine, {{0, ov_request(engine->model(), c)}}), c);
    items += static_cast<int64_t>(c.items.size());
  }
  EXPECT_EQ(engine->runner().num_images_encoded(), items);
}

TEST_F(CudaEngineOnevision, BatchedUnderChunksCuttingMediaRuns) {
  auto engine = ov_gpu_engine(ov_gpu_config(4, 1024, 13));
  ASSERT_TRUE(engine->backend().encodes_media());
  const std::vector<OnevisionCase> cases = onevision_recorded_cases(onevision_gpu_root(), onevision_gpu_model_dir());
  std::vector<Submission> subs;
  for (size_t k = 0; k < cases.size(); ++k) subs.push_back({static_cast<int>(k % 3), ov_request(engine->model(), cases[k])});
  const auto results = run_engine(*engine, subs);
  for (const OnevisionCase& c : cases) expect_hf(results, c);
}

}  // namespace
}  // namespace vlm::testing

namespace vlm::testing {
namespace {

// The same chats on the CPU engine (runs without a GPU): the reference the GPU runs are held to.
TEST(CpuEngineOnevisionGpuFixture, ChatsMatchHf) {
  EngineConfig c = test_config(16, 128, 512);
  c.device = Device::Cpu;
  auto engine = ov_gpu_engine(c);
  for (const OnevisionCase& oc : onevision_recorded_cases(onevision_gpu_root(), onevision_gpu_model_dir()))
    expect_hf(run_engine(*engine, {{0, ov_request(engine->model(), oc)}}), oc);
}

}  // namespace
}  // namespace vlm::testing
