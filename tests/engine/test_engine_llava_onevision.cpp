// The engine on LLaVA-OneVision (tests/fixtures/llava_onevision: a tiny model with the real Qwen
// vocabulary and tokenizer): the recorded chats (images of several aspect ratios, two images, a
// video, a mix over two turns) go through the chat template, the tokenizer and the server's
// media loader (PNG data URLs -> AnyRes tiles / frames), and the prompt equals transformers 5.17's
// processor output token for token, with the video tokens tagged by frame (ceil(g/2)^2 tokens a
// frame, the final newline on the last frame); the engine then generates exactly what HF's
// generate() did, alone and all together under prefill chunks that cut media runs.
#include <gtest/gtest.h>

#include "model/chat/chat_template.h"
#include "model/families/llava_onevision.h"
#include "model/tokenizer/tokenizer.h"
#include "server/media/onevision_media_loader.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/onevision_fixture.h"

namespace vlm::testing {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

const LlavaOnevisionModel& model() {
  static const auto m = LlavaOnevisionModel::load(onevision_model_dir());
  return *m;
}

struct Case {
  json hf;
  std::string text;               // the rendered template
  MultimodalPrompt prompt;        // ids expanded and tagged
  std::vector<MediaPixels> items; // prompt order
};

// What the server does for a chat: render, tokenize, load the media, expand the placeholders.
Case assemble(const json& hf) {
  const std::string dir = onevision_model_dir();
  static const auto tok = Tokenizer::load(dir);
  static const auto tmpl = ChatTemplate::load(dir);
  OnevisionMediaOptions o;
  o.image = OnevisionPreprocessConfig::load(dir, false);
  o.video = OnevisionPreprocessConfig::load(dir, true);
  o.image_token_id = model().image_token_id();
  o.video_token_id = model().video_token_id();
  o.grid = model().grid();
  o.max_num_patches = model().config().max_num_patches;
  const OnevisionMediaLoader loader(MediaFetchOptions{}, ImageLimits{}, o);
  Case c;
  c.hf = hf;
  ordered_json plain = ordered_json::array();
  std::vector<MediaPixels> images, videos;  // the template writes a message's images, then its videos
  for (const auto& m : hf["messages"]) {
    ordered_json msg{{"role", m["role"]}, {"content", ordered_json::array()}};
    for (const auto& p : m["content"]) {
      if (p["type"] == "image") {
        images.push_back(loader.load_image(onevision_data_url(p["media"][0]), "image_url"));
        msg["content"].push_back({{"type", "image"}});
      } else if (p["type"] == "video") {
        std::vector<std::string> frames;
        for (const auto& f : p["media"]) frames.push_back(onevision_data_url(f));
        videos.push_back(loader.load_video(frames, 2.0, "video_url"));
        msg["content"].push_back({{"type", "video"}});
      } else {
        msg["content"].push_back(ordered_json{{"type", "text"}, {"text", p["text"].get<std::string>()}});
      }
    }
    plain.push_back(msg);
  }
  c.items = images;
  c.items.insert(c.items.end(), videos.begin(), videos.end());
  c.text = tmpl->render(plain, ordered_json{{"add_generation_prompt", true}});
  const std::vector<int32_t> ids = tok->encode(c.text, /*add_special_tokens=*/false);
  std::vector<MediaTokens> mt;
  for (const MediaPixels& m : c.items) mt.push_back(loader.tokens(m));
  c.prompt = expand_media_tokens(ids, o.image_token_id, o.video_token_id, mt);
  return c;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = [] {
    std::vector<Case> v;
    for (const auto& c : onevision_cases()) v.push_back(assemble(c));
    return v;
  }();
  return all;
}

GenerationRequest request(const std::string& id, const Case& c) {
  GenerationRequest r = greedy_request(id, c.prompt.token_ids, static_cast<int>(c.hf["generated_ids"].size()));
  r.prompt_modalities = c.prompt.modalities;
  r.images = c.items;
  return r;
}

void expect_hf(const std::map<std::string, RequestResult>& results, const std::string& id, const Case& c) {
  const RequestResult& r = results.at(id);
  ASSERT_TRUE(r.done) << id;
  ASSERT_FALSE(r.error) << id << ": " << r.error->message;
  EXPECT_EQ(r.choices.at(0).tokens, c.hf["generated_ids"].get<std::vector<int32_t>>())
      << id << " differs from Hugging Face (min margin " << c.hf["min_margin"] << ")";
  ASSERT_TRUE(r.usage);
  EXPECT_EQ(r.usage->prompt_tokens, static_cast<int64_t>(c.hf["input_ids"].size())) << id;
}

std::unique_ptr<Engine> ov_engine(const EngineConfig& c) {
  return std::make_unique<Engine>(c, std::unique_ptr<Model>(LlavaOnevisionModel::load(onevision_model_dir())));
}

TEST(EngineLlavaOnevision, PromptAssemblyMatchesHfProcessor) {
  ASSERT_EQ(cases().size(), 9u);
  const int64_t per_frame = pooled_frame_tokens(model().grid());
  EXPECT_EQ(per_frame, 9);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.hf["name"].get<std::string>());
    EXPECT_EQ(c.text, c.hf["prompt_text"].get<std::string>());
    EXPECT_EQ(c.prompt.token_ids, c.hf["input_ids"].get<std::vector<int32_t>>());
    for (size_t k = 0; k < c.items.size(); ++k) {
      const MediaPixels& m = c.items[k];
      EXPECT_EQ(c.prompt.tokens_per_frame[k], model().tokens_per_frame(m));
      if (m.modality == Modality::Video) EXPECT_EQ(c.prompt.tokens_per_frame[k], per_frame);
    }
    // Video tokens carry their frame; the newline after the last frame counts to the last frame.
    for (size_t t = 0; t < c.prompt.token_ids.size(); ++t) {
      const ModalityTag tag = c.prompt.modalities[t];
      if (tag.modality != Modality::Video) {
        EXPECT_EQ(c.prompt.frame[t], -1) << t;
        continue;
      }
      const int32_t frames = c.items[static_cast<size_t>(tag.media_index)].num_frames;
      EXPECT_EQ(c.prompt.frame[t], std::min<int32_t>(c.prompt.media_offset[t] / 9, frames - 1)) << t;
    }
  }
}

TEST(EngineLlavaOnevision, EachChatAloneMatchesHfGenerate) {
  auto engine = ov_engine(test_config(16, 128, 512));
  for (const Case& c : cases()) expect_hf(run_engine(*engine, {{0, request(c.hf["name"], c)}}), c.hf["name"], c);
  EXPECT_EQ(engine->runner().num_images_encoded(), 11);  // 7 one-item chats, two images, image + video
}

// Prefill chunks of 13 tokens start and end inside image and video runs; all chats share steps.
TEST(EngineLlavaOnevision, BatchedUnderChunksCuttingMediaRuns) {
  auto engine = ov_engine(test_config(4, 1024, 13));
  std::vector<Submission> subs;
  for (size_t k = 0; k < cases().size(); ++k)
    subs.push_back({static_cast<int>(k % 3), request(cases()[k].hf["name"], cases()[k])});
  const auto results = run_engine(*engine, subs);
  for (const Case& c : cases()) expect_hf(results, c.hf["name"], c);
  EXPECT_EQ(engine->runner().num_images_encoded(), 11);  // each item once, however chunked
}

}  // namespace
}  // namespace vlm::testing
