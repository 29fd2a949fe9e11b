// vlm-server serving LLaVA-OneVision (tests/fixtures/llava_onevision with the real Qwen tokenizer,
// exact path, f32 KV cache): chat completions whose messages hold images of several aspect
// ratios, two images, a video (frame lists) and a mix return the tokens transformers 5.17's
// processor + generate() gave, with top-5 log-probabilities within 1e-4 of HF's; /tokenize gives
// the HF processor's input_ids. The prefill is chunked (16 tokens) so chunks cut media runs.
// Bad frame lists and video files (not taken by this family yet) answer 400.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "tests/support/onevision_fixture.h"
#include "tests/support/onevision_server_chats.h"
#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

ordered_json openai_messages(const json& c) { return onevision_openai_messages(c, onevision_fixture_root()); }

class LlavaOnevisionServerTest : public ::testing::Test {
 protected:
  static ServerProcess& server() {
    static ServerProcess s(std::string(VLM_BIN_DIR) + "/vlm-server",
                           std::vector<std::string>{"--model", onevision_model_dir(), "--served-model-name", "ov",
                                                    "--kv-cache-dtype", "f32", "--num-kv-blocks", "128",
                                                    "--max-model-len", "1024", "--threads", "2", "--log-level",
                                                    "warn", "--max-video-frames", "6",
                                                    "--max-num-batched-tokens", "16"});
    return s;
  }
  static json cases() { return onevision_cases(); }
  HttpResult post(const std::string& path, const ordered_json& body) {
    return http_request("POST", server().base_url() + path, body.dump());
  }
};

TEST_F(LlavaOnevisionServerTest, ChatsGiveHfGreedyAndLogprobs) {
  const json all = cases();
  ASSERT_EQ(all.size(), 9u);
  for (const auto& c : all) {
    const std::string name = c["name"];
    const std::vector<int32_t> generated = c["generated_ids"];
    const auto n = static_cast<int>(generated.size());
    HttpResult r = post("/v1/chat/completions", {{"messages", openai_messages(c)},
                                                 {"max_tokens", n},
                                                 {"temperature", 0},
                                                 {"return_token_ids", true},
                                                 {"logprobs", true},
                                                 {"top_logprobs", 5}});
    ASSERT_EQ(r.status, 200) << name << ": " << r.body;
    const json j = json::parse(r.body);
    EXPECT_EQ(j["choices"][0]["token_ids"].get<std::vector<int32_t>>(), generated)
        << name << " (HF min logit margin " << c["min_margin"] << ")";
    EXPECT_EQ(j["usage"]["prompt_tokens"], c["input_ids"].size()) << name;  // media tokens counted
    const json& steps = j["choices"][0]["logprobs"]["content"];
    ASSERT_EQ(steps.size(), generated.size()) << name;
    double worst = 0;
    for (size_t s = 0; s < steps.size(); ++s) {
      const json& hf = c["top_logprobs"][s];  // [[id, logprob] x 5], best first
      const json& ours = steps[s]["top_logprobs"];
      ASSERT_EQ(ours.size(), hf.size()) << name << " step " << s;
      for (size_t i = 0; i < hf.size(); ++i) {
        const double want = hf[i][1].get<double>(), got = ours[i]["logprob"].get<double>();
        worst = std::max(worst, std::abs(got - want) / std::max(1.0, std::abs(want)));
      }
      EXPECT_NEAR(steps[s]["logprob"].get<double>(), hf[0][1].get<double>(), 1e-4 * std::max(1.0, std::abs(hf[0][1].get<double>())))
          << name << " step " << s;
    }
    EXPECT_LE(worst, 1e-4) << name << ": top-5 log-probabilities vs HF";
    std::printf("  %-10s %3zu prompt tokens: greedy %s, top-5 logprobs max rel. error %.2e over %zu steps\n",
                name.c_str(), c["input_ids"].size(),
                j["choices"][0]["token_ids"].get<std::vector<int32_t>>() == generated ? "equal" : "DIFFERENT", worst,
                steps.size());
  }
}

TEST_F(LlavaOnevisionServerTest, TokenizeGivesHfInputIds) {
  for (const auto& c : cases()) {
    HttpResult r = post("/tokenize", {{"messages", openai_messages(c)}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body)["tokens"].get<std::vector<int32_t>>(), c["input_ids"].get<std::vector<int32_t>>())
        << c["name"];
  }
}

// A message whose video part comes before its image part: the template writes the image first,
// and the parts follow their placeholders (the "mixed" case's tokens, same answer).
TEST_F(LlavaOnevisionServerTest, PartsFollowTheTemplatesPlaceholderOrder) {
  json mixed;
  for (const auto& c : cases())
    if (c["name"] == "mixed") mixed = c;
  ASSERT_FALSE(mixed.is_null());
  ordered_json m = openai_messages(mixed);
  std::swap(m[0]["content"][0], m[0]["content"][1]);
  ASSERT_EQ(m[0]["content"][0]["type"], "video_url");
  HttpResult r = post("/v1/chat/completions", {{"messages", m}, {"max_tokens", 8}, {"temperature", 0},
                                               {"return_token_ids", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["choices"][0]["token_ids"].get<std::vector<int32_t>>(),
            mixed["generated_ids"].get<std::vector<int32_t>>());
}

TEST_F(LlavaOnevisionServerTest, BadVideosAnswer400) {
  ordered_json frames = ordered_json::array();
  for (int i = 0; i < 7; ++i) frames.push_back(onevision_data_url("clip4_0.png"));
  ordered_json m = ordered_json::array(
      {{{"role", "user"}, {"content", {{{"type", "video_url"}, {"video_url", {{"url", frames}}}}}}}});
  HttpResult r = post("/v1/chat/completions", {{"messages", m}, {"max_tokens", 2}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("at most 6"), std::string::npos) << r.body;
  frames = ordered_json::array({onevision_data_url("clip4_0.png"), onevision_data_url("wide.png")});
  m[0]["content"][0]["video_url"]["url"] = frames;
  r = post("/v1/chat/completions", {{"messages", m}, {"max_tokens", 2}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("all frames must have one size"), std::string::npos) << r.body;
  m[0]["content"][0]["video_url"]["url"] = onevision_data_url("clip4_0.png");  // one URL: a video file
  r = post("/v1/chat/completions", {{"messages", m}, {"max_tokens", 2}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("list of frame URLs"), std::string::npos) << r.body;
}

// The GPU fixture (tests/fixtures/llava_onevision_gpu, ov_gpu) served on the CPU: the reference
// its GPU run (tests/server/cuda/test_cuda_onevision_server.cpp) is held to, and a check that the
// served copy (ov_gpu with the Qwen3 tokenizer) tokenizes as HF's processor did.
TEST(OnevisionGpuFixtureServerCpu, ChatsGiveHfGreedyAndLogprobs) {
  ServerProcess s(vlm_binary("vlm-server"),
                  {"--model", onevision_gpu_served_dir(), "--device", "cpu", "--kv-cache-dtype", "f32",
                   "--num-kv-blocks", "128", "--max-model-len", "1024", "--threads", "2", "--log-level", "warn",
                   "--max-video-frames", "6", "--max-num-batched-tokens", "16"});
  const json cases = json::parse(read_whole_file(onevision_gpu_model_dir() + "/cases.json"));
  for (const auto& c : cases) {
    const HttpResult r = http_request("POST", s.base_url() + "/tokenize",
                                      ordered_json{{"messages", onevision_openai_messages(c, onevision_gpu_root())}}.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body)["tokens"].get<std::vector<int32_t>>(), c["input_ids"].get<std::vector<int32_t>>())
        << c["name"];
  }
  expect_served_onevision_chats_match_hf(s, onevision_gpu_root(), onevision_gpu_model_dir(), 1e-4, "cpu ov_gpu");
  EXPECT_EQ(s.terminate(), 0);
}

}  // namespace
}  // namespace vlm::testing
