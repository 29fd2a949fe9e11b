// The engine on a LLaVA model (tests/fixtures/llava/llava_small): prompts given as HF's
// input_ids with HF's pixel_values generate HF's greedy tokens through the engine: each prompt
// alone, all three with a text request in one batch under prefill chunks that cut through image
// runs, with n = 2 choices, and with a KV cache so small that sequences are preempted and
// recomputed (images encoded again). Requests with bad media are refused with a 400.
#include <gtest/gtest.h>

#include "kernels/core/check.h"
#include "model/families/llava.h"
#include "model/decoder/safetensors.h"
#include "tests/engine/engine_test_util.h"

namespace vlm::testing {
namespace {

const std::string kModel = std::string(VLM_FIXTURES_DIR) + "/llava/llava_small";

struct LlavaPrompt {
  std::vector<int32_t> ids;
  std::vector<ModalityTag> tags;
  std::vector<ImagePixels> images;
  std::vector<int32_t> greedy;
};

const std::vector<LlavaPrompt>& prompts() {
  static const std::vector<LlavaPrompt> all = [] {
    const auto model = LlavaModel::load(kModel);
    const auto ref = SafetensorsFile::open(kModel + "/reference.safetensors");
    auto ints = [&](const std::string& name) {
      const TensorView& t = ref->tensors().at(name);
      return std::vector<int32_t>(t.as<const int32_t>(), t.as<const int32_t>() + t.numel());
    };
    std::vector<LlavaPrompt> out;
    for (int k = 0; ref->tensors().count("p" + std::to_string(k) + ".ids"); ++k) {
      const std::string p = "p" + std::to_string(k);
      const TensorView& px = ref->tensors().at(p + ".pixels");  // [N, 3, S, S]
      LlavaPrompt lp;
      lp.ids = ints(p + ".ids");
      lp.greedy = ints(p + ".greedy");
      const int64_t N = px.dim(0), per = px.numel() / N;
      lp.tags = model->build_prompt(lp.ids, static_cast<int32_t>(N)).modalities;
      for (int64_t i = 0; i < N; ++i) {
        const float* src = px.as<const float>() + i * per;
        lp.images.push_back({std::vector<float>(src, src + per), static_cast<int>(px.dim(2)), static_cast<int>(px.dim(3))});
      }
      out.push_back(std::move(lp));
    }
    return out;
  }();
  return all;
}

GenerationRequest llava_request(const std::string& id, const LlavaPrompt& p) {
  GenerationRequest r = greedy_request(id, p.ids, static_cast<int>(p.greedy.size()));
  r.prompt_modalities = p.tags;
  r.images = p.images;
  return r;
}

std::unique_ptr<Engine> llava_engine(const EngineConfig& c) {
  return std::make_unique<Engine>(c, std::unique_ptr<Model>(LlavaModel::load(kModel)));
}

// A text-only prompt on the same decoder; its expected tokens come from a run alone.
GenerationRequest text_request() {
  return greedy_request("text", {1, 2223, 725, 28747, 22557, 354, 264, 2485, 28723, 8602, 8048, 12738, 28747}, 12);
}

// Request "p<k>" of results generated prompt k's HF greedy tokens.
void expect_hf(const std::map<std::string, RequestResult>& results, size_t k) {
  const std::string id = "p" + std::to_string(k);
  const RequestResult& r = results.at(id);
  ASSERT_TRUE(r.done) << id;
  ASSERT_FALSE(r.error) << id << ": " << r.error->message;
  EXPECT_EQ(r.choices.at(0).tokens, prompts()[k].greedy) << id << " differs from Hugging Face";
  ASSERT_TRUE(r.usage);
  EXPECT_EQ(r.usage->prompt_tokens, static_cast<int64_t>(prompts()[k].ids.size())) << id;  // image tokens count
}

void expect_all_hf(const std::map<std::string, RequestResult>& results) {
  for (size_t k = 0; k < prompts().size(); ++k) expect_hf(results, k);
}

TEST(EngineLlava, EachPromptAloneMatchesHf) {
  ASSERT_EQ(prompts().size(), 3u);
  for (size_t k = 0; k < prompts().size(); ++k) {
    EngineConfig c = test_config(16, 64, 512);
    c.enable_prefix_caching = false;  // with it, the second run skips the encoder (test_prefix_cache_engine)
    auto engine = llava_engine(c);
    const std::string id = "p" + std::to_string(k);
    expect_hf(run_engine(*engine, {{0, llava_request(id, prompts()[k])}}), k);
    expect_hf(run_engine(*engine, {{0, llava_request(id, prompts()[k])}}), k);  // encoded again
    EXPECT_EQ(engine->runner().num_images_encoded(), 2 * static_cast<int64_t>(prompts()[k].images.size()));
  }
}

// Chunks of 5, 7 and 13 tokens start and end inside the 16-token image runs; the three image
// requests and a text one share every step.
TEST(EngineLlava, BatchedWithTextUnderChunksCuttingImageRuns) {
  std::vector<int32_t> text_alone;
  {
    auto engine = llava_engine(test_config(16, 64, 512));
    text_alone = run_engine(*engine, {{0, text_request()}}).at("text").choices.at(0).tokens;
    EXPECT_EQ(engine->runner().num_images_encoded(), 0);
  }
  for (int budget : {5, 7, 13}) {
    SCOPED_TRACE("max_num_batched_tokens " + std::to_string(budget));
    auto engine = llava_engine(test_config(4, 128, budget));
    std::vector<Submission> subs;
    for (size_t k = 0; k < prompts().size(); ++k)
      subs.push_back({static_cast<int>(k), llava_request("p" + std::to_string(k), prompts()[k])});
    subs.push_back({1, text_request()});
    const auto results = run_engine(*engine, subs);
    expect_all_hf(results);
    EXPECT_EQ(results.at("text").choices.at(0).tokens, text_alone);
    EXPECT_EQ(engine->runner().num_images_encoded(), 6);  // each image once, however chunked
  }
}

TEST(EngineLlava, TwoChoicesShareTheImagePrefill) {
  auto engine = llava_engine(test_config(16, 64, 512));
  GenerationRequest r = llava_request("p0", prompts()[0]);
  r.params.n = 2;
  const auto results = run_engine(*engine, {{0, r}});
  EXPECT_EQ(results.at("p0").choices.at(0).tokens, prompts()[0].greedy);
  EXPECT_EQ(results.at("p0").choices.at(1).tokens, prompts()[0].greedy);
}

TEST(EngineLlava, PreemptionRecomputesImages) {
  EngineConfig c = test_config(4, 30, 24);  // 120 slots for sequences of 58, 106 and 70 tokens
  c.max_model_len = 120;
  auto engine = llava_engine(c);
  std::vector<Submission> subs;
  for (size_t k = 0; k < prompts().size(); ++k)
    subs.push_back({0, llava_request("p" + std::to_string(k), prompts()[k])});
  subs.push_back({0, text_request()});
  expect_all_hf(run_engine(*engine, subs));
  EXPECT_GT(engine->stats().num_preemptions, 0);
  EXPECT_GT(engine->runner().num_images_encoded(), 6);
}

TEST(EngineLlava, RefusesBadMedia) {
  auto engine = llava_engine(test_config(16, 64, 512));
  auto expect_400 = [&](const GenerationRequest& r, const std::string& what) {
    try {
      engine->validate(r);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const RequestError& e) {
      EXPECT_EQ(e.status(), 400) << what;
    }
  };
  const LlavaPrompt& p = prompts()[1];
  GenerationRequest r = llava_request("x", p);
  r.images.pop_back();
  expect_400(r, "a tagged image without pixels");
  r = llava_request("x", p);
  r.images[1].data.resize(10);
  expect_400(r, "pixels of the wrong size");
  r = llava_request("x", p);
  r.prompt_modalities[12] = ModalityTag{};
  expect_400(r, "an image run one token short");
  r = llava_request("x", p);
  std::swap(r.prompt_modalities[12], r.prompt_modalities[40]);
  expect_400(r, "image tokens not consecutive");
  r = llava_request("x", p);
  r.prompt_modalities.clear();
  expect_400(r, "images without tags");

  auto text_engine = make_engine("llama_tiny", test_config());
  GenerationRequest t = greedy_request("t", {1, 2, 3}, 2);
  t.images.push_back(p.images[0]);
  t.prompt_modalities = {ModalityTag{}, ModalityTag{}, ModalityTag{}};
  try {
    text_engine->validate(t);
    ADD_FAILURE() << "a text model accepted an image";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("image"), std::string::npos);
  }
}

}  // namespace
}  // namespace vlm::testing
