// vlm-server serving a LLaVA-1.5 checkpoint (tests/fixtures/llava/llava_small with the Llama-2
// tokenizer plus the fixture processor's added tokens, <image> = 32000 and <pad> = 32001, and a
// "ROLE: parts" chat template): the rendered prompts tokenize to the fixture's input_ids, and
// chat completions with the fixture's images (base64 data: URLs and http://127.0.0.1 URLs served
// by the test) return Hugging Face's greedy tokens and text. Media limits answer 400.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "model/decoder/safetensors.h"
#include "model/tokenizer/tokenizer.h"
#include "server/http/base64.h"
#include "tests/support/server_process.h"
#include "tests/support/test_http_server.h"

namespace vlm::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kLlava = std::string(VLM_FIXTURES_DIR) + "/llava";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct FixturePrompt {
  std::vector<int32_t> ids, greedy;
};

FixturePrompt fixture_prompt(int k) {
  const auto ref = SafetensorsFile::open(kLlava + "/llava_small/reference.safetensors");
  auto ints = [&](const std::string& name) {
    const TensorView& t = ref->tensors().at(name);
    return std::vector<int32_t>(t.as<const int32_t>(), t.as<const int32_t>() + t.numel());
  };
  const std::string p = "p" + std::to_string(k);
  return {ints(p + ".ids"), ints(p + ".greedy")};
}

json text_part(const std::string& t) { return {{"type", "text"}, {"text", t}}; }
json image_part(const std::string& url) { return {{"type", "image_url"}, {"image_url", {{"url", url}}}}; }

std::string data_url(const std::string& file) {
  const std::string mime = file.ends_with(".jpg") ? "image/jpeg" : "image/png";
  return "data:" + mime + ";base64," + base64_encode(read_file(kLlava + "/images/" + file));
}

// Fixture prompt 0 ("USER: <image>\nWhat is shown in this image? ASSISTANT:", cat_crop) and
// prompt 1 (three images interleaved with text), as chat messages with the given image URLs.
json messages_p0(const std::string& cat) {
  return json::array({{{"role", "user"}, {"content", {image_part(cat), text_part("What is shown in this image?")}}}});
}
json messages_p1(const std::string& rocket, const std::string& odd, const std::string& astronaut) {
  return json::array({{{"role", "user"},
                       {"content",
                        {text_part("Here are three pictures. "), image_part(rocket), text_part("The first one. "),
                         image_part(odd), text_part("Then "), image_part(astronaut),
                         text_part("Which one is the brightest?")}}}});
}

class LlavaServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    images_ = new TestHttpServer({
        {"/cat.png", [](const std::string&) { return TestResponse{200, "image/png", read_file(kLlava + "/images/cat_crop.png")}; }},
        {"/rocket.png", [](const std::string&) { return TestResponse{200, "image/png", read_file(kLlava + "/images/rocket_crop.png")}; }},
        {"/coffee.jpg", [](const std::string&) { return TestResponse{200, "image/jpeg", read_file(kLlava + "/images/coffee.jpg")}; }},
    });
    server_ = new ServerProcess(std::string(VLM_BIN_DIR) + "/vlm-server",
                                {"--model", llava_model_dir(), "--served-model-name", "llava", "--kv-cache-dtype", "f32",
                                 "--num-kv-blocks", "256", "--max-model-len", "1024", "--threads", "2",
                                 "--log-level", "warn", "--allowed-media-domains", "127.0.0.1",
                                 "--max-images-per-request", "3", "--max-image-pixels", "100000"});
    tok_ = Tokenizer::load(llava_model_dir()).release();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete images_;
    delete tok_;
  }
  static HttpResult post(const std::string& path, const json& body) {
    return http_request("POST", server_->base_url() + path, body.dump());
  }
  // A greedy chat completion of n tokens; checks HF's tokens, text and usage.
  static void expect_greedy(const json& messages, const FixturePrompt& want) {
    const auto n = static_cast<int>(want.greedy.size());
    HttpResult r = post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", n}, {"temperature", 0},
                                                 {"ignore_eos", true}, {"return_token_ids", true}});
    ASSERT_EQ(r.status, 200) << r.body;
    const json j = json::parse(r.body);
    EXPECT_EQ(j["choices"][0]["token_ids"].get<std::vector<int32_t>>(), want.greedy);
    // The text of the greedy tokens after the prompt (as vLLM's incremental detokenizer gives it:
    // a leading "▁" of the first token is a space here, where decoding the tokens alone strips it).
    std::vector<int32_t> all = want.ids;
    all.insert(all.end(), want.greedy.begin(), want.greedy.end());
    const std::string full = tok_->decode(all, true), prompt = tok_->decode(want.ids, true);
    ASSERT_EQ(full.substr(0, prompt.size()), prompt);
    EXPECT_EQ(j["choices"][0]["message"]["content"], full.substr(prompt.size()));
    EXPECT_EQ(j["usage"]["prompt_tokens"], want.ids.size());  // image tokens counted, as vLLM does
    EXPECT_EQ(j["usage"]["completion_tokens"], n);
  }
  static void expect_400(const json& messages, const std::string& needle) {
    HttpResult r = post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 2}});
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_NE(r.body.find(needle), std::string::npos) << r.body;
  }
  static TestHttpServer* images_;
  static ServerProcess* server_;
  static Tokenizer* tok_;
};
TestHttpServer* LlavaServerTest::images_ = nullptr;
ServerProcess* LlavaServerTest::server_ = nullptr;
Tokenizer* LlavaServerTest::tok_ = nullptr;

TEST_F(LlavaServerTest, ChatTemplateRendersTheFixturePromptsExactly) {
  const json cases[] = {messages_p0(data_url("cat_crop.png")),
                        messages_p1(data_url("rocket_crop.png"), data_url("synth_odd_83x29.png"),
                                    data_url("astronaut_crop.jpg"))};
  for (int k = 0; k < 2; ++k) {
    HttpResult r = post("/tokenize", {{"messages", cases[k]}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body)["tokens"].get<std::vector<int32_t>>(), fixture_prompt(k).ids) << "prompt " << k;
  }
}

TEST_F(LlavaServerTest, Base64ImageGivesHfGreedy) { expect_greedy(messages_p0(data_url("cat_crop.png")), fixture_prompt(0)); }

TEST_F(LlavaServerTest, StreamingWithAnImageGivesTheSameTokens) {
  const FixturePrompt want = fixture_prompt(0);
  HttpResult r = post("/v1/chat/completions",
                      {{"messages", messages_p0(data_url("cat_crop.png"))}, {"max_tokens", want.greedy.size()},
                       {"temperature", 0}, {"ignore_eos", true}, {"return_token_ids", true}, {"stream", true},
                       {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<int32_t> tokens;
  json usage;
  for (size_t pos = 0; (pos = r.body.find("data: {", pos)) != std::string::npos; ++pos) {
    const json chunk = json::parse(r.body.substr(pos + 6, r.body.find("\n\n", pos) - pos - 6));
    if (chunk.contains("usage") && !chunk["usage"].is_null()) usage = chunk["usage"];
    for (const auto& c : chunk["choices"])
      if (c.contains("token_ids")) for (int32_t t : c["token_ids"]) tokens.push_back(t);
  }
  EXPECT_EQ(tokens, want.greedy);
  EXPECT_EQ(usage["prompt_tokens"], want.ids.size());
}

TEST_F(LlavaServerTest, HttpImageGivesHfGreedy) {
  const int before = images_->requests_served();
  expect_greedy(messages_p0(images_->url("/cat.png")), fixture_prompt(0));
  EXPECT_EQ(images_->requests_served(), before + 1);
}

TEST_F(LlavaServerTest, ThreeInterleavedImagesGiveHfGreedy) {
  expect_greedy(messages_p1(images_->url("/rocket.png"), data_url("synth_odd_83x29.png"),
                            data_url("astronaut_crop.jpg")),
                fixture_prompt(1));
}

TEST_F(LlavaServerTest, MediaLimitsAnswer400) {
  const std::string cat = data_url("cat_crop.png");
  json four = messages_p0(cat);
  for (int i = 0; i < 3; ++i) four[0]["content"].push_back(image_part(cat));
  expect_400(four, "at most 3");
  expect_400(messages_p0(images_->url("/coffee.jpg")), "pixel");  // 600x400 > --max-image-pixels
  expect_400(messages_p0("data:image/png;base64," + base64_encode("not an image")), "image");
  expect_400(messages_p0(images_->url("/missing.png")), "404");
  expect_400(json::array({{{"role", "user"}, {"content", {{{"type", "video_url"}, {"video_url", {{"url", cat}}}}}}}}),
             "video_url");
}

TEST(LlavaServer, HttpImageWithoutAllowedDomainsIsRefused) {
  TestHttpServer images({{"/cat.png", [](const std::string&) {
                            return TestResponse{200, "image/png", read_file(kLlava + "/images/cat_crop.png")};
                          }}});
  ServerProcess server(std::string(VLM_BIN_DIR) + "/vlm-server",
                       {"--model", llava_model_dir(), "--num-kv-blocks", "64", "--max-model-len", "512", "--threads", "1",
                        "--log-level", "warn"});
  HttpResult r = http_request("POST", server.base_url() + "/v1/chat/completions",
                              json{{"messages", messages_p0(images.url("/cat.png"))}, {"max_tokens", 2}}.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(images.requests_served(), 0);
}

}  // namespace
}  // namespace vlm::testing
