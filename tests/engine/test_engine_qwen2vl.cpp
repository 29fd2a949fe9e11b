// The engine on Qwen2-VL and Qwen2.5-VL (tests/fixtures/qwen2vl_server: tiny models with the
// real Qwen vocabulary and tokenizer): chat messages holding an image, two images, a video, and
// a video + an image + text over two turns go through the chat template, the tokenizer and the
// server's media loader (PNG data URLs -> smart_resize -> patches), and the engine generates
// exactly what transformers 5.17's processor + generate() did — alone, all together with a text
// request under prefill chunks that cut through media runs, and under preemption. Prompt
// assembly (rendered text, expanded ids, grids, video frame tags) equals the HF processor's.
#include <gtest/gtest.h>

#include "kernels/core/check.h"
#include "model/families/llava.h"
#include "model/families/qwen2_vl.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/qwen2vl_chat_cases.h"

namespace vlm::testing {
namespace {


struct Case {
  Qwen2VLChatCase hf;
  Qwen2VLPromptInput in;
};

const std::vector<Case>& cases(const std::string& model) {
  static std::map<std::string, std::vector<Case>> all;
  auto& v = all[model];
  if (v.empty())
    for (auto& c : qwen2vl_chat_cases(model)) {
      Case x{c, qwen2vl_prompt_input(model, c)};
      v.push_back(std::move(x));
    }
  return v;
}

GenerationRequest request(const std::string& id, const Case& c) {
  GenerationRequest r = greedy_request(id, c.in.ids, static_cast<int>(c.hf.generated.size()));
  r.prompt_modalities = c.in.tags;
  r.images = c.in.items;
  return r;
}

std::unique_ptr<Engine> qwen_engine(const std::string& model, const EngineConfig& c) {
  return std::make_unique<Engine>(c, std::unique_ptr<Model>(Qwen2VLModel::load(qwen2vl_chat_model_dir(model))));
}

void expect_hf(const std::map<std::string, RequestResult>& results, const std::string& id, const Case& c) {
  const RequestResult& r = results.at(id);
  ASSERT_TRUE(r.done) << id;
  ASSERT_FALSE(r.error) << id << ": " << r.error->message;
  EXPECT_EQ(r.choices.at(0).tokens, c.hf.generated) << id << " differs from Hugging Face (min margin "
                                                    << c.hf.min_margin << ")";
  ASSERT_TRUE(r.usage);
  EXPECT_EQ(r.usage->prompt_tokens, static_cast<int64_t>(c.hf.input_ids.size())) << id;
}

class EngineQwen2VL : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineQwen2VL, PromptAssemblyMatchesHfProcessor) {
  const std::string model = GetParam();
  const auto cfg = Qwen2VLConfig::load(qwen2vl_chat_model_dir(model));
  ASSERT_EQ(cases(model).size(), 4u);
  for (const Case& c : cases(model)) {
    SCOPED_TRACE(c.hf.name);
    EXPECT_EQ(c.in.text, c.hf.prompt_text);
    EXPECT_EQ(c.in.ids, c.hf.input_ids);
    std::vector<std::array<int32_t, 3>> ig, vg;
    std::vector<float> spg;
    for (const MediaPixels& m : c.in.items) {
      if (m.modality == Modality::Video) {
        vg.push_back(m.grid_thw);
        spg.push_back(m.second_per_grid);
      } else {
        ig.push_back(m.grid_thw);
      }
    }
    EXPECT_EQ(ig, c.hf.image_grids);
    EXPECT_EQ(vg, c.hf.video_grids);
    if (cfg.vision.qwen25) {
      EXPECT_EQ(spg, c.hf.second_per_grid);
    }
    // Video tokens carry their frame; each frame holds rows x cols (after the merger) tokens.
    const MultimodalPrompt& p = c.in.prompt;
    ASSERT_EQ(p.frame.size(), p.token_ids.size());
    for (size_t k = 0; k < c.in.items.size(); ++k) {
      const auto& g = c.in.items[k].grid_thw;
      EXPECT_EQ(p.tokens_per_frame[k], static_cast<int64_t>(g[1]) * g[2] / 4);
    }
    for (size_t t = 0; t < p.token_ids.size(); ++t) {
      const ModalityTag tag = p.modalities[t];
      if (tag.modality == Modality::Video) {
        EXPECT_EQ(p.frame[t], p.media_offset[t] / p.tokens_per_frame[static_cast<size_t>(tag.media_index)]) << t;
        EXPECT_EQ(p.token_ids[t], cfg.video_token_id);
      } else {
        EXPECT_EQ(p.frame[t], -1) << t;
      }
    }
    // The already-expanded form (HF's input_ids) gives the same tagged prompt.
    std::vector<MediaTokens> items;
    for (size_t k = 0; k < c.in.items.size(); ++k)
      items.push_back({c.in.items[k].modality, static_cast<int64_t>(c.in.items[k].grid_thw[0]) * p.tokens_per_frame[k],
                       p.tokens_per_frame[k]});
    const MultimodalPrompt e = expand_media_tokens(c.hf.input_ids, cfg.image_token_id, cfg.video_token_id, items);
    EXPECT_EQ(e.token_ids, p.token_ids);
    EXPECT_EQ(e.modalities, p.modalities);
    EXPECT_EQ(e.frame, p.frame);
  }
}

TEST_P(EngineQwen2VL, EachChatAloneMatchesHfGenerate) {
  const std::string model = GetParam();
  auto engine = qwen_engine(model, test_config(16, 64, 512));
  for (const Case& c : cases(model)) expect_hf(run_engine(*engine, {{0, request(c.hf.name, c)}}), c.hf.name, c);
  EXPECT_EQ(engine->runner().num_images_encoded(), 6);  // 1 + 2 + 1 + 2 items
}

// Prefill chunks of 7 and 13 tokens start and end inside image and video runs; the four chats
// and a text request share steps (decode rows of M-RoPE sequences next to prefill rows).
TEST_P(EngineQwen2VL, BatchedUnderChunksCuttingMediaRuns) {
  const std::string model = GetParam();
  std::vector<int32_t> text_alone;
  const GenerationRequest text = greedy_request("text", {151644, 872, 198, 9707, 11, 1879, 0, 151645, 198}, 8);
  {
    auto engine = qwen_engine(model, test_config(16, 64, 512));
    text_alone = run_engine(*engine, {{0, text}}).at("text").choices.at(0).tokens;
  }
  for (int budget : {7, 13}) {
    SCOPED_TRACE("max_num_batched_tokens " + std::to_string(budget));
    auto engine = qwen_engine(model, test_config(4, 256, budget));
    std::vector<Submission> subs;
    for (size_t k = 0; k < cases(model).size(); ++k)
      subs.push_back({static_cast<int>(k), request(cases(model)[k].hf.name, cases(model)[k])});
    subs.push_back({2, text});
    const auto results = run_engine(*engine, subs);
    for (const Case& c : cases(model)) expect_hf(results, c.hf.name, c);
    EXPECT_EQ(results.at("text").choices.at(0).tokens, text_alone);
    EXPECT_EQ(engine->runner().num_images_encoded(), 6);  // each item once, however chunked
  }
}

TEST_P(EngineQwen2VL, PreemptionRecomputesMedia) {
  const std::string model = GetParam();
  EngineConfig c = test_config(4, 40, 32);  // 160 slots for 40 + 55 + 39 + 85 prompt tokens and outputs
  c.max_model_len = 160;
  auto engine = qwen_engine(model, c);
  std::vector<Submission> subs;
  for (const Case& k : cases(model)) subs.push_back({0, request(k.hf.name, k)});
  const auto results = run_engine(*engine, subs);
  for (const Case& k : cases(model)) expect_hf(results, k.hf.name, k);
  EXPECT_GT(engine->stats().num_preemptions, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineQwen2VL,
                         ::testing::Values(std::string("qwen2_vl_chat"), std::string("qwen2_5_vl_chat")));

TEST(EngineQwen2VLErrors, RefusesBadMedia) {
  const std::string model = "qwen2_vl_chat";
  auto engine = qwen_engine(model, test_config(16, 64, 512));
  auto expect_400 = [&](const GenerationRequest& r, const std::string& what) {
    try {
      engine->validate(r);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const RequestError& e) {
      EXPECT_EQ(e.status(), 400) << what;
    }
  };
  const Case& vit = cases(model)[3];  // video, then image
  GenerationRequest r = request("x", vit);
  r.images[0].data.resize(100);
  expect_400(r, "video patches of the wrong size");
  r = request("x", vit);
  r.images[0].grid_thw[1] = 3;
  expect_400(r, "a grid that is not a multiple of the merge size");
  r = request("x", vit);
  std::swap(r.images[0], r.images[1]);
  expect_400(r, "items in the wrong order (tag modality differs)");
  r = request("x", vit);
  r.images[1].modality = Modality::Video;
  expect_400(r, "an image tagged as a video item");
  r = request("x", vit);
  r.images[1].grid_thw = {1, 4, 4};
  r.images[1].data.resize(static_cast<size_t>(16) * 1176);
  expect_400(r, "a grid whose token count does not match the prompt");

  // LLaVA takes no video.
  auto llava = std::make_unique<Engine>(test_config(16, 64, 512),
                                        std::unique_ptr<Model>(LlavaModel::load(
                                            std::string(VLM_FIXTURES_DIR) + "/llava/llava_small")));
  GenerationRequest v = greedy_request("v", {1, 32000, 32000, 2}, 2);
  MediaPixels vid;
  vid.modality = Modality::Video;
  v.images.push_back(vid);
  v.prompt_modalities = {ModalityTag{}, {Modality::Video, 0}, {Modality::Video, 0}, ModalityTag{}};
  try {
    llava->validate(v);
    ADD_FAILURE() << "LLaVA accepted a video";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("video"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vlm::testing
