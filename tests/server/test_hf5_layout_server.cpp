// Checkpoints saved by transformers 5 (issue 18; tests/fixtures/hf5_layout): LLaVA, Qwen2-VL and
// Qwen2.5-VL directories with one processor_config.json (the image and video processors' settings
// nested) and chat_template.jinja load and, through /v1/chat/completions with an f32 KV cache,
// give Hugging Face's greedy tokens and logprobs (within 1e-4) for an image, two images, a video
// sent as bare frames without fps (HF takes such frames as 24 fps) and a mixed conversation;
// /tokenize gives the HF processor's input_ids. LLaVA's chat prompts carry the tokenizer's BOS as
// HF's processor adds it, once, whether or not the template writes {{ bos_token }}.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "server/http/base64.h"
#include "tests/support/hf5_layout_cases.h"
#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr double kLogprobTol = 1e-4;

std::unique_ptr<ServerProcess> start_server(const std::string& dir) {
  return std::make_unique<ServerProcess>(
      std::string(VLM_BIN_DIR) + "/vlm-server",
      std::vector<std::string>{"--model", dir, "--served-model-name", "m", "--kv-cache-dtype", "f32",
                               "--num-kv-blocks", "128", "--max-model-len", "1024", "--threads", "2",
                               "--log-level", "warn", "--max-images-per-request", "4", "--max-num-batched-tokens",
                               "32"});
}

class Hf5LayoutServerTest : public ::testing::TestWithParam<std::string> {
 protected:
  static ServerProcess& server(const std::string& model) {
    static std::map<std::string, std::unique_ptr<ServerProcess>> servers;
    auto& s = servers[model];
    if (!s) s = start_server(hf5_layout_model_dir(model));
    return *s;
  }
  HttpResult post(const std::string& path, const ordered_json& body) {
    return http_request("POST", server(GetParam()).base_url() + path, body.dump());
  }
};

TEST_P(Hf5LayoutServerTest, ChatsGiveHfTokensAndLogprobs) {
  const auto cases = hf5_layout_cases(GetParam());
  ASSERT_GE(cases.size(), 3u);
  for (const auto& c : cases) {
    const auto n = static_cast<int>(c.steps.size());
    HttpResult r = post("/v1/chat/completions", {{"messages", c.messages}, {"max_tokens", n}, {"temperature", 0},
                                                 {"ignore_eos", true}, {"return_token_ids", true},
                                                 {"logprobs", true}, {"top_logprobs", 5}});
    ASSERT_EQ(r.status, 200) << c.name << ": " << r.body;
    const json j = json::parse(r.body);
    std::vector<int32_t> want;
    for (const auto& s : c.steps) want.push_back(s.id);
    EXPECT_EQ(want, c.generated) << c.name << ": HF's generate() and its full recompute differ";
    ASSERT_EQ(j["choices"][0]["token_ids"].get<std::vector<int32_t>>(), want) << c.name;
    EXPECT_EQ(j["usage"]["prompt_tokens"], c.input_ids.size()) << c.name;
    const json& content = j["choices"][0]["logprobs"]["content"];
    ASSERT_EQ(content.size(), c.steps.size()) << c.name;
    double worst = 0;
    for (size_t i = 0; i < c.steps.size(); ++i) {
      worst = std::max(worst, std::abs(content[i]["logprob"].get<double>() - c.steps[i].logprob));
      std::vector<double> top;
      for (const auto& t : content[i]["top_logprobs"]) top.push_back(t["logprob"].get<double>());
      std::sort(top.rbegin(), top.rend());
      ASSERT_EQ(top.size(), c.steps[i].top_logprobs.size()) << c.name;
      for (size_t k = 0; k < top.size(); ++k) worst = std::max(worst, std::abs(top[k] - c.steps[i].top_logprobs[k]));
    }
    EXPECT_LE(worst, kLogprobTol) << c.name;
    RecordProperty(GetParam() + "." + c.name + ".max_logprob_diff", std::to_string(worst));
  }
}

TEST_P(Hf5LayoutServerTest, TokenizeGivesHfInputIds) {
  for (const auto& c : hf5_layout_cases(GetParam())) {
    HttpResult r = post("/tokenize", {{"messages", c.messages}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body)["tokens"].get<std::vector<int32_t>>(), c.input_ids) << c.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Hf5LayoutServerTest,
                         ::testing::Values(std::string("llava"), std::string("qwen2_vl"), std::string("qwen2_5_vl")));

// The video case again with an explicit fps of 24 gives the same tokens (the default is HF's 24);
// with fps 2 Qwen2.5-VL's temporal positions change (second_per_grid 1 s instead of 1/12 s).
TEST(Hf5LayoutVideoFps, BareFramesDefaultTo24Fps) {
  const auto cases = hf5_layout_cases("qwen2_5_vl");
  const Hf5Case& c = cases[2];
  ASSERT_EQ(c.name, "video");
  auto srv = start_server(hf5_layout_model_dir("qwen2_5_vl"));
  auto greedy = [&](double fps) {
    ordered_json m = c.messages;
    m[0]["content"][0]["video_url"]["fps"] = fps;
    HttpResult r = http_request("POST", srv->base_url() + "/v1/chat/completions",
                                ordered_json{{"messages", m}, {"max_tokens", c.steps.size()}, {"temperature", 0},
                                             {"ignore_eos", true}, {"logprobs", true}}
                                    .dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body)["choices"][0]["logprobs"]["content"][0]["logprob"].get<double>();
  };
  EXPECT_NEAR(greedy(24.0), c.steps[0].logprob, kLogprobTol);
  EXPECT_GT(std::abs(greedy(2.0) - c.steps[0].logprob), 10 * kLogprobTol)
      << "fps 2 should move Qwen2.5-VL's temporal positions";
}

// LLaVA chat prompts: HF's processor adds the tokenizer's BOS to the rendered template; a template
// that writes {{ bos_token }} itself still gives one BOS (HF's apply_chat_template(tokenize=True)).
// The template with {{ bos_token }} comes from chat_template.json here (the other file HF reads).
TEST(Hf5LayoutBos, LlavaPromptIdsEqualHfProcessor) {
  const json all = json::parse(std::ifstream(std::string(VLM_FIXTURES_DIR) + "/hf5_layout/bos_cases.json"));
  int checked = 0;
  for (const auto& c : all) {
    if (c["tokenizer"] != "llava") continue;
    const std::string name = c["name"].get<std::string>();
    const std::string dir = hf5_layout_model_dir("llava", {"chat_template.jinja"});
    std::ofstream(dir + "/chat_template.json") << json{{"chat_template", c["template"]}}.dump();
    auto srv = start_server(dir);
    json messages = c["messages"];
    std::ifstream png(std::string(VLM_FIXTURES_DIR) + "/llava/images/cat_crop.png", std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(png)), std::istreambuf_iterator<char>());
    messages[0]["content"][0] = {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64," + base64_encode(bytes)}}}};
    HttpResult r = http_request("POST", srv->base_url() + "/tokenize", json{{"messages", messages}}.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const auto ids = json::parse(r.body)["tokens"].get<std::vector<int32_t>>();
    const bool template_writes_bos = c["rendered"].get<std::string>().rfind("<s>", 0) == 0;
    // Without {{ bos_token }}: the processor's call on the rendered text. With it: HF's processor
    // call would give two BOS; its apply_chat_template(tokenize=True) gives one, as we do.
    const auto want = c[template_writes_bos ? "processor_apply_chat_template_ids" : "processor_ids"]
                          .get<std::vector<int32_t>>();
    EXPECT_EQ(ids, want) << name;
    ASSERT_GE(ids.size(), 2u);
    EXPECT_EQ(ids[0], 1) << name;
    EXPECT_NE(ids[1], 1) << name << ": two BOS";
    // The engine runs these ids: prompt_tokens of a completion counts the same.
    HttpResult g = http_request("POST", srv->base_url() + "/v1/chat/completions",
                                json{{"messages", messages}, {"max_tokens", 1}, {"return_token_ids", true}}.dump());
    ASSERT_EQ(g.status, 200) << g.body;
    const json gj = json::parse(g.body);
    EXPECT_EQ(gj["usage"]["prompt_tokens"], want.size()) << name;
    if (gj.contains("prompt_token_ids")) EXPECT_EQ(gj["prompt_token_ids"].get<std::vector<int32_t>>(), want) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

}  // namespace
}  // namespace vlm::testing
