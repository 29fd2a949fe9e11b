// vlm-server serving Qwen2-VL and Qwen2.5-VL (tests/fixtures/qwen2vl_server with the real Qwen
// tokenizer): chat completions whose messages hold images (image_url data URLs) and videos
// (video_url frame lists with fps, and Qwen's {"type": "video", "video": [...]}) return the
// tokens and text transformers 5.17's processor + generate() gave; /tokenize gives the HF
// processor's input_ids. Malformed or refused video parts answer 400 naming the problem.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/qwen2vl_chat_cases.h"
#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

class Qwen2VLServerTest : public ::testing::TestWithParam<std::string> {
 protected:
  static ServerProcess& server(const std::string& model) {
    static std::map<std::string, std::unique_ptr<ServerProcess>> servers;
    auto& s = servers[model];
    if (!s)
      s = std::make_unique<ServerProcess>(
          std::string(VLM_BIN_DIR) + "/vlm-server",
          std::vector<std::string>{"--model", qwen2vl_chat_model_dir(model), "--served-model-name", "qwen",
                                   "--kv-cache-dtype", "f32", "--num-kv-blocks", "128", "--max-model-len", "1024",
                                   "--threads", "2", "--log-level", "warn", "--max-video-frames", "6",
                                   "--max-videos-per-request", "1", "--max-num-batched-tokens", "16"});
    return *s;
  }
  HttpResult post(const std::string& path, const ordered_json& body) {
    return http_request("POST", server(GetParam()).base_url() + path, body.dump());
  }
  void expect_hf(const ordered_json& messages, const Qwen2VLChatCase& c) {
    const auto n = static_cast<int>(c.generated.size());
    HttpResult r = post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", n}, {"temperature", 0},
                                                 {"return_token_ids", true}});
    ASSERT_EQ(r.status, 200) << r.body;
    const json j = json::parse(r.body);
    EXPECT_EQ(j["choices"][0]["token_ids"].get<std::vector<int32_t>>(), c.generated)
        << c.name << " (HF min logit margin " << c.min_margin << ")";
    EXPECT_EQ(j["choices"][0]["message"]["content"], c.generated_text) << c.name;
    EXPECT_EQ(j["usage"]["prompt_tokens"], c.input_ids.size()) << c.name;  // media tokens count
    EXPECT_EQ(j["usage"]["completion_tokens"], n);
  }
  void expect_400(const ordered_json& messages, const std::string& needle) {
    HttpResult r = post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 2}});
    EXPECT_EQ(r.status, 400) << needle << ": " << r.body;
    EXPECT_NE(r.body.find(needle), std::string::npos) << r.body;
  }
};

TEST_P(Qwen2VLServerTest, ChatsGiveHfGreedy) {
  const auto cases = qwen2vl_chat_cases(GetParam());
  ASSERT_EQ(cases.size(), 4u);
  for (const auto& c : cases) expect_hf(c.messages, c);
}

TEST_P(Qwen2VLServerTest, TokenizeGivesHfInputIds) {
  for (const auto& c : qwen2vl_chat_cases(GetParam())) {
    HttpResult r = post("/tokenize", {{"messages", c.messages}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body)["tokens"].get<std::vector<int32_t>>(), c.input_ids) << c.name;
  }
}

// The same video as Qwen's {"type": "video", "video": [...]} part, and as a bare list with fps
// on the part (2.0, what the "video" case used; without fps the frames count as 24 fps).
TEST_P(Qwen2VLServerTest, VideoPartForms) {
  const auto cases = qwen2vl_chat_cases(GetParam());
  const Qwen2VLChatCase& c = cases[2];
  ASSERT_EQ(c.name, "video");
  ordered_json m = c.messages;
  const ordered_json frames = m[0]["content"][0]["video_url"]["url"];
  m[0]["content"][0] = {{"type", "video"}, {"video", frames}, {"fps", 2.0}};
  expect_hf(m, c);
  m[0]["content"][0] = {{"type", "video_url"}, {"video_url", frames}, {"fps", 2.0}};
  expect_hf(m, c);
}

TEST_P(Qwen2VLServerTest, BadVideosAnswer400) {
  const auto cases = qwen2vl_chat_cases(GetParam());
  const ordered_json base = cases[2].messages;  // one video of 4 frames, then text
  const ordered_json frames = base[0]["content"][0]["video_url"]["url"];
  auto with_video = [&](const ordered_json& part) {
    ordered_json m = base;
    m[0]["content"][0] = part;
    return m;
  };
  ordered_json seven = frames;
  for (int i = 0; i < 3; ++i) seven.push_back(frames[i]);
  expect_400(with_video({{"type", "video_url"}, {"video_url", {{"url", seven}}}}), "at most 6");
  ordered_json mixed = frames;
  mixed[1] = png_data_url("clip3_0.png");
  expect_400(with_video({{"type", "video_url"}, {"video_url", {{"url", mixed}}}}), "all frames must have one size");
  // One URL is a video file: a PNG is not a video container (tests/server/test_video_server.cpp has the rest).
  expect_400(with_video({{"type", "video_url"}, {"video_url", {{"url", frames[0]}}}}), "is not accepted");
  expect_400(with_video({{"type", "video_url"}, {"video_url", {{"url", frames}, {"fps", -1}}}}), "fps");
  expect_400(with_video({{"type", "video_url"}, {"video_url", {{"url", ordered_json::array()}}}}), "video_url");
  expect_400(with_video({{"type", "video_url"}, {"video_url", {{"url", {1, 2}}}}}), "video_url");
  expect_400(with_video({{"type", "video"}, {"video", 7}}), "video");
  ordered_json ftp = frames;
  ftp[0] = "ftp://example.com/f0.png";
  expect_400(with_video({{"type", "video_url"}, {"video_url", {{"url", ftp}}}}), "ftp");
  ordered_json two = base;
  two[0]["content"].push_back(base[0]["content"][0]);
  expect_400(two, "at most 1");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Qwen2VLServerTest,
                         ::testing::Values(std::string("qwen2_vl_chat"), std::string("qwen2_5_vl_chat")));

}  // namespace
}  // namespace vlm::testing
