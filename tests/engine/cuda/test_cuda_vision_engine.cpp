// The engine on the GPU with media (--device cuda): LLaVA-1.5 and Qwen2-VL / Qwen2.5-VL fixture
// prompts (an image, a video, two images and a video; HF's input_ids and pixel_values) encode their media
// on the GPU (CudaMediaEncoder; the rows go to the decoder's input embeddings on the device) and
// generate exactly transformers 5.17's greedy tokens on the exact path (--dtype float32): each
// alone, and all together with a text request under prefill chunks that cut through media runs
// (a step's media encoded whole, or lazily frame by frame as the chunks reach them).
// An image beyond the encoder's reservation is refused with a 400 and the engine keeps serving; a
// video beyond it whose frames fit encodes in whole-frame groups.
// Skips without a GPU.
#include <gtest/gtest.h>

#include "kernels/core/check.h"
#include "model/decoder/safetensors.h"
#include "model/families/llava.h"
#include "model/families/qwen2_vl.h"
#include "tests/engine/cuda/qwen2vl_gpu_prompts.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/gpu_test.h"
#include "model/families/multimodal_input.h"

namespace vlm::testing {
namespace {

void expect_tokens(const std::map<std::string, RequestResult>& results, const std::string& id,
                   const std::vector<int32_t>& want) {
  const RequestResult& r = results.at(id);
  ASSERT_TRUE(r.done) << id;
  ASSERT_FALSE(r.error) << id << ": " << r.error->message;
  EXPECT_EQ(r.choices.at(0).tokens, want) << id << " differs from Hugging Face";
}

class CudaEngineQwen2VL : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { VLM_REQUIRE_GPU(); }
};

TEST_P(CudaEngineQwen2VL, EachPromptAloneMatchesHfGreedy) {
  const std::string model = GetParam();
  auto engine = qwen_engine(model, gpu_config(16, 64, 512));
  ASSERT_TRUE(engine->backend().encodes_media()) << "media did not go to the GPU encoder";
  const auto prompts = qwen_prompts(model);
  for (const QwenPrompt& q : prompts)
    expect_tokens(run_engine(*engine, {{0, q.request}}), q.request.id, q.greedy);
  EXPECT_EQ(engine->runner().num_images_encoded(), 5);  // 1 + 1 + 3 items
}

TEST_P(CudaEngineQwen2VL, BatchedUnderChunksCuttingMediaRuns) {
  const std::string model = GetParam();
  const GenerationRequest text = greedy_request("text", {5, 9, 33, 7, 100, 3, 17, 4}, 8);
  std::vector<int32_t> text_alone;
  {
    auto engine = qwen_engine(model, gpu_config(16, 64, 512));
    text_alone = run_engine(*engine, {{0, text}}).at("text").choices.at(0).tokens;
  }
  const auto prompts = qwen_prompts(model);
  // media_step_patches 1: every frame of a step's media is its own lazy unit, encoded when a
  // chunk first reads its rows (0: a step's media encode whole).
  for (int64_t step_patches : {int64_t(0), int64_t(1)})
    for (int budget : {7, 512}) {
      SCOPED_TRACE("max_num_batched_tokens " + std::to_string(budget) + ", media_step_patches " +
                   std::to_string(step_patches));
      EngineConfig c = gpu_config(4, 256, budget);
      c.media_step_patches = step_patches;
      auto engine = qwen_engine(model, c);
      std::vector<Submission> subs;
      for (size_t k = 0; k < prompts.size(); ++k) subs.push_back({static_cast<int>(k), prompts[k].request});
      subs.push_back({1, text});
      const auto results = run_engine(*engine, subs);
      for (const QwenPrompt& q : prompts) expect_tokens(results, q.request.id, q.greedy);
      EXPECT_EQ(results.at("text").choices.at(0).tokens, text_alone);
    }
}

// The prefill-only budget (issue 38, SchedulerConfig::prefill_only_batched_tokens): steps without a
// decode batch up to 29 tokens (auto: kCudaPrefillOnlyBatchedTokens, a whole prompt), steps with
// one keep the budget of 7; a bigger chunk reads several lazy media units (media_step_patches 1:
// a frame each), all encoded in its step. The same HF greedy tokens.
TEST_P(CudaEngineQwen2VL, PrefillOnlyBudgetMatchesHfGreedy) {
  const std::string model = GetParam();
  const GenerationRequest text = greedy_request("text", {5, 9, 33, 7, 100, 3, 17, 4}, 8);
  std::vector<int32_t> text_alone;
  {
    auto engine = qwen_engine(model, gpu_config(16, 64, 512));
    text_alone = run_engine(*engine, {{0, text}}).at("text").choices.at(0).tokens;
  }
  const auto prompts = qwen_prompts(model);
  for (int po : {29, kPrefillOnlyTokensAuto}) {
    SCOPED_TRACE("prefill_only_batched_tokens " + std::to_string(po));
    EngineConfig c = gpu_config(4, 256, 7);
    c.media_step_patches = 1;
    c.scheduler.prefill_only_batched_tokens = po;
    auto engine = qwen_engine(model, c);
    EXPECT_EQ(engine->config().scheduler.prefill_only_batched_tokens, po > 0 ? po : kCudaPrefillOnlyBatchedTokens);
    for (const QwenPrompt& q : prompts)  // each alone: no decode until its prompt is done
      expect_tokens(run_engine(*engine, {{0, q.request}}), q.request.id, q.greedy);
    std::vector<Submission> subs;  // staggered: steps with and without decodes
    for (size_t k = 0; k < prompts.size(); ++k) subs.push_back({static_cast<int>(3 * k), prompts[k].request});
    subs.push_back({1, text});
    const auto results = run_engine(*engine, subs);
    for (const QwenPrompt& q : prompts) expect_tokens(results, q.request.id, q.greedy);
    EXPECT_EQ(results.at("text").choices.at(0).tokens, text_alone);
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, CudaEngineQwen2VL,
                         ::testing::Values(std::string("qwen2_vl_tiny"), std::string("qwen2_5_vl_tiny")));

TEST(CudaEngineQwen2VLMemory, MediaBeyondTheReservationIsA400) {
  VLM_REQUIRE_GPU();
  const auto prompts = qwen_prompts("qwen2_vl_tiny");
  const GenerationRequest& fits = prompts[0].request;  // one image of 1x8x10 patches
  const GenerationRequest& big = prompts[2].request;   // images of 1x4x8 (synth) and 1x14x6 (rocket), a video
  EngineConfig c = gpu_config(16, 64, 512);
  c.max_media_patches = 80;  // the first image exactly; the rocket's 84 patches are beyond it
  auto engine = qwen_engine("qwen2_vl_tiny", c);
  try {
    engine->validate(big);
    ADD_FAILURE() << "an image beyond the reservation was accepted";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("needs 84 vision-encoder rows"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--max-media-patches"), std::string::npos) << e.what();
  }
  expect_tokens(run_engine(*engine, {{0, fits}}), fits.id, prompts[0].greedy);
}

// Issue 38 item 6: the reservation bounds one encoder call, not a video. A video of more encoder
// rows than --max-media-patches whose frames fit is accepted and encoded in whole-frame groups
// (eagerly, media_step_patches 0) to the same tokens as HF (= the eager whole-video encode of
// EachPromptAloneMatchesHfGreedy); a reservation below one frame is a 400 naming the flag.
TEST(CudaEngineQwen2VLMemory, VideoBeyondTheReservationEncodesInFrameGroups) {
  VLM_REQUIRE_GPU();
  const auto prompts = qwen_prompts("qwen2_vl_tiny");
  const QwenPrompt& video = prompts[1];  // one video of 2x4x6 patches: 48 rows, 24 a frame
  ASSERT_EQ(video.request.images.size(), 1u);
  ASSERT_EQ(video.request.images[0].grid_thw[0], 2);
  for (int64_t reserved : {int64_t(24), int64_t(30)}) {
    SCOPED_TRACE("max_media_patches " + std::to_string(reserved));
    EngineConfig c = gpu_config(16, 64, 512);
    c.max_media_patches = reserved;  // below the video's 48 rows, at or above one frame's 24
    c.media_step_patches = 0;        // eager groups (not the lazy per-chunk units)
    auto engine = qwen_engine("qwen2_vl_tiny", c);
    EXPECT_NO_THROW(engine->validate(video.request));
    expect_tokens(run_engine(*engine, {{0, video.request}}), video.request.id, video.greedy);
  }
  EngineConfig c = gpu_config(16, 64, 512);
  c.max_media_patches = 23;  // below one frame
  auto engine = qwen_engine("qwen2_vl_tiny", c);
  try {
    engine->validate(video.request);
    ADD_FAILURE() << "a video whose frame exceeds the reservation was accepted";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("needs 24 vision-encoder rows per frame"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--max-media-patches"), std::string::npos) << e.what();
  }
}

// LLaVA: HF's input_ids and pixel_values (tests/fixtures/llava/llava_small/reference.safetensors).
TEST(CudaEngineLlava, PromptsAloneAndBatchedMatchHf) {
  VLM_REQUIRE_GPU();
  const std::string dir = std::string(VLM_FIXTURES_DIR) + "/llava/llava_small";
  const auto ref = SafetensorsFile::open(dir + "/reference.safetensors");
  const auto model = LlavaModel::load(dir);
  auto ints = [&](const std::string& name) {
    const TensorView& t = ref->tensors().at(name);
    return std::vector<int32_t>(t.as<const int32_t>(), t.as<const int32_t>() + t.numel());
  };
  std::vector<GenerationRequest> reqs;
  std::vector<std::vector<int32_t>> want;
  for (int k = 0; ref->tensors().count("p" + std::to_string(k) + ".ids"); ++k) {
    const std::string p = "p" + std::to_string(k);
    const TensorView& px = ref->tensors().at(p + ".pixels");
    const int64_t N = px.dim(0), per = px.numel() / N;
    want.push_back(ints(p + ".greedy"));
    GenerationRequest r = greedy_request(p, ints(p + ".ids"), static_cast<int>(want.back().size()));
    r.prompt_modalities = model->build_prompt(r.prompt_ids, static_cast<int32_t>(N)).modalities;
    for (int64_t i = 0; i < N; ++i) {
      MediaPixels m;
      m.data.assign(px.as<const float>() + i * per, px.as<const float>() + (i + 1) * per);
      m.height = static_cast<int>(px.dim(2));
      m.width = static_cast<int>(px.dim(3));
      r.images.push_back(std::move(m));
    }
    reqs.push_back(std::move(r));
  }
  auto make = [&](int budget) {
    return std::make_unique<Engine>(gpu_config(16, 256, budget), std::unique_ptr<Model>(LlavaModel::load(dir)));
  };
  auto engine = make(512);
  ASSERT_TRUE(engine->backend().encodes_media());
  for (size_t k = 0; k < reqs.size(); ++k) expect_tokens(run_engine(*engine, {{0, reqs[k]}}), reqs[k].id, want[k]);
  auto chunked = make(13);
  std::vector<Submission> subs;
  for (size_t k = 0; k < reqs.size(); ++k) subs.push_back({static_cast<int>(k), reqs[k]});
  const auto results = run_engine(*chunked, subs);
  for (size_t k = 0; k < reqs.size(); ++k) expect_tokens(results, reqs[k].id, want[k]);
}

}  // namespace
}  // namespace vlm::testing

namespace vlm::testing {
namespace {

// The same prompts on the CPU engine (runs without a GPU): the reference the GPU runs are held to.
TEST(CpuEngineQwen2VLTiny, PromptsMatchHfGreedy) {
  for (const std::string model : {"qwen2_vl_tiny", "qwen2_5_vl_tiny"}) {
    EngineConfig c = test_config(16, 64, 512);
    c.device = Device::Cpu;
    auto engine = qwen_engine(model, c);
    for (const QwenPrompt& q : qwen_prompts(model))
      expect_tokens(run_engine(*engine, {{0, q.request}}), q.request.id, q.greedy);
  }
}

}  // namespace
}  // namespace vlm::testing
