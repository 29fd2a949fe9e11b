// LOOK-M through the real vlm-server (LLaVA fixture, random weights, real images): the server
// flags (--look-m, its ratios, --look-m-text-only) and the per-request "vlm_options.look_m"
// override reach the engine; usage.vlm reports the prompt's KV tokens before and kept
// (non-streaming and in the final streaming usage chunk); /metrics counts the KV bytes saved as
// the freed blocks' bytes; "off" per request is bit-identical to Hugging Face's greedy tokens.
// Also the override's parser (server/look_m_option.h) on good and bad values.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/decoder/safetensors.h"
#include "server/http/base64.h"
#include "server/look_m_option.h"
#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

using nlohmann::json;

const std::string kLlava = std::string(VLM_FIXTURES_DIR) + "/llava";

std::string data_url(const std::string& file) {
  std::ifstream in(kLlava + "/images/" + file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string mime = file.ends_with(".jpg") ? "image/jpeg" : "image/png";
  return "data:" + mime + ";base64," + base64_encode(ss.str());
}

// Fixture prompt 0 of llava_small (cat_crop) and its HF greedy tokens.
json image_messages() {
  return json::array({{{"role", "user"},
                       {"content", {{{"type", "image_url"}, {"image_url", {{"url", data_url("cat_crop.png")}}}},
                                    {{"type", "text"}, {"text", "What is shown in this image?"}}}}}});
}
json text_messages() {
  return json::array({{{"role", "user"},
                       {"content", "Tell me a long story about a cat, a rocket and a cup of coffee on the moon."}}});
}
std::vector<int32_t> hf_greedy_p0() {
  const auto ref = SafetensorsFile::open(kLlava + "/llava_small/reference.safetensors");
  const TensorView& t = ref->tensors().at("p0.greedy");
  return std::vector<int32_t>(t.as<const int32_t>(), t.as<const int32_t>() + t.numel());
}

std::vector<std::string> server_args(std::vector<std::string> extra) {
  std::vector<std::string> a = {"--model", llava_model_dir(), "--served-model-name", "llava", "--kv-cache-dtype",
                                "f32", "--block-size", "4", "--num-kv-blocks", "256", "--max-model-len", "512",
                                "--threads", "2", "--log-level", "warn"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

struct Reply {
  json usage;                    // the (final) usage object
  std::vector<int32_t> tokens;   // choice 0's token ids
};

Reply chat(const ServerProcess& s, const json& messages, const json& extra = json::object(), bool stream = false) {
  json body = {{"messages", messages}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true},
               {"return_token_ids", true}};
  body.update(extra);
  if (stream) body["stream"] = true, body["stream_options"] = {{"include_usage", true}};
  HttpResult r = http_request("POST", s.base_url() + "/v1/chat/completions", body.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  Reply out;
  if (r.status != 200) return out;
  if (!stream) {
    const json j = json::parse(r.body);
    out.usage = j["usage"];
    out.tokens = j["choices"][0]["token_ids"].get<std::vector<int32_t>>();
    return out;
  }
  std::istringstream lines(r.body);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("data: ") || line == "data: [DONE]") continue;
    const json c = json::parse(line.substr(6));
    if (c.contains("usage") && !c["usage"].is_null()) out.usage = c["usage"];
    for (const auto& ch : c["choices"])
      if (ch.contains("token_ids")) {
        const auto ids = ch["token_ids"].get<std::vector<int32_t>>();
        out.tokens.insert(out.tokens.end(), ids.begin(), ids.end());
      }
  }
  return out;
}

double metric(const ServerProcess& s, const std::string& name) {
  HttpResult r = http_request("GET", s.base_url() + "/metrics");
  EXPECT_EQ(r.status, 200);
  std::istringstream lines(r.body);
  for (std::string line; std::getline(lines, line);)
    if (line.starts_with(name + "{") || line.starts_with(name + " ")) return std::stod(line.substr(line.rfind(' ') + 1));
  ADD_FAILURE() << name << " not in /metrics";
  return -1;
}

// K + V bytes of one block over all layers of llava_small (2 layers, 2 KV heads, D = 8), block
// size 4, f32 cache.
constexpr double kBlockBytes = 2.0 * 2 * 2 * 4 * 8 * 4;

void expect_compressed(const json& usage, double rr, double ir) {
  ASSERT_TRUE(usage.contains("vlm")) << usage.dump();
  const int64_t L = usage["prompt_tokens"].get<int64_t>();
  EXPECT_EQ(usage["vlm"]["look_m_kv_tokens_before"], L);
  EXPECT_EQ(usage["vlm"]["look_m_kv_tokens_kept"],
            static_cast<int64_t>(std::floor(rr * double(L))) + static_cast<int64_t>(std::floor(ir * double(L))));
}

TEST(LookMServer, FlagsUsageMetricsAndOverrides) {
  ServerProcess s(std::string(VLM_BIN_DIR) + "/vlm-server",
                  server_args({"--look-m", "text-prior-pivot", "--look-m-recent-ratio", "0.25",
                               "--look-m-important-ratio", "0.125", "--look-m-scores", "full"}));
  // An image prompt is compressed; usage.vlm reports it, streaming or not, with the same tokens.
  const Reply plain = chat(s, image_messages());
  expect_compressed(plain.usage, 0.25, 0.125);
  const Reply streamed = chat(s, image_messages(), json::object(), true);
  expect_compressed(streamed.usage, 0.25, 0.125);
  EXPECT_EQ(streamed.tokens, plain.tokens);
  EXPECT_EQ(plain.usage["prompt_tokens"], streamed.usage["prompt_tokens"]);
  // Freed bytes = freed blocks x block bytes, and something was freed.
  const double blocks = metric(s, "vlm:look_m_kv_blocks_freed_total");
  EXPECT_GT(blocks, 0);
  EXPECT_EQ(metric(s, "vlm:look_m_kv_bytes_saved_total"), blocks * kBlockBytes);
  EXPECT_EQ(metric(s, "vlm:look_m_compressions_total"), 2);
  // Per request off: full cache, Hugging Face's greedy tokens, nothing in usage.vlm.
  const Reply off = chat(s, image_messages(), {{"vlm_options", {{"look_m", "off"}}}});
  EXPECT_FALSE(off.usage.contains("vlm")) << off.usage.dump();
  const std::vector<int32_t> hf = hf_greedy_p0();
  ASSERT_GE(hf.size(), off.tokens.size());
  EXPECT_EQ(off.tokens, std::vector<int32_t>(hf.begin(), hf.begin() + off.tokens.size()));
  // Per request settings replace the server's.
  const Reply other =
      chat(s, image_messages(), {{"vlm_options", {{"look_m", {{"mode", "h2o"}, {"recent_ratio", 0.5}, {"important_ratio", 0.25}}}}}});
  expect_compressed(other.usage, 0.5, 0.25);
  // Text-only prompts are left alone by default (--look-m-text-only 0) ...
  const Reply text = chat(s, text_messages());
  EXPECT_FALSE(text.usage.contains("vlm")) << text.usage.dump();
  // ... unless the request allows it.
  const Reply text_on = chat(s, text_messages(), {{"vlm_options", {{"look_m", {{"text_only_prompts", true}}}}}});
  expect_compressed(text_on.usage, 0.1, 0.1);
  EXPECT_EQ(metric(s, "vlm:look_m_compressions_total"), 4);
}

TEST(LookMServer, TextOnlyFlagAndOffByDefault) {
  {
    ServerProcess s(std::string(VLM_BIN_DIR) + "/vlm-server",
                    server_args({"--look-m", "pivot", "--look-m-text-only", "1"}));
    expect_compressed(chat(s, text_messages()).usage, 0.1, 0.1);
    expect_compressed(chat(s, text_messages(), json::object(), true).usage, 0.1, 0.1);
    EXPECT_FALSE(chat(s, text_messages(), {{"vlm_options", {{"look_m", "off"}}}}).usage.contains("vlm"));
  }
  // Without --look-m the server does not compress, but a request may ask for it.
  ServerProcess s(std::string(VLM_BIN_DIR) + "/vlm-server", server_args({}));
  EXPECT_FALSE(chat(s, image_messages()).usage.contains("vlm"));
  expect_compressed(chat(s, image_messages(), {{"vlm_options", {{"look_m", "text-prior-avg"}}}}).usage, 0.1, 0.1);
  EXPECT_EQ(metric(s, "vlm:look_m_compressions_total"), 1);
}

nlohmann::ordered_json body(const std::string& look_m) {
  return nlohmann::ordered_json::parse(R"({"vlm_options":{"look_m":)" + look_m + "}}");
}

TEST(LookMOption, ParsesModesAndSettings) {
  EXPECT_FALSE(parse_look_m_option(nlohmann::ordered_json::parse("{}")).has_value());
  EXPECT_FALSE(parse_look_m_option(body("null")).has_value());
  EXPECT_EQ(parse_look_m_option(body(R"("off")")), LookMSetting{});
  const auto avg = parse_look_m_option(body(R"("text-prior-avg")"));
  ASSERT_TRUE(avg && avg->enabled);
  EXPECT_EQ(avg->params.merge, KVMerge::Average);
  EXPECT_TRUE(avg->params.text_prior);
  const auto o = parse_look_m_option(body(
      R"({"mode":"weighted","recent_ratio":0.3,"important_tokens":7,"scores":"full","window":9,"text_only_prompts":true})"));
  ASSERT_TRUE(o && o->enabled);
  EXPECT_EQ(look_m_mode_name(o->params), "weighted");
  EXPECT_EQ(o->params.recent_ratio, 0.3);
  EXPECT_EQ(o->params.important_tokens, 7);
  EXPECT_EQ(o->params.scores, LookMScores::Full);
  EXPECT_EQ(o->params.window, 9);
  EXPECT_TRUE(o->params.text_only_prompts);
  EXPECT_FALSE(parse_look_m_option(body(R"({"mode":"off","recent_ratio":0.3})"))->enabled);
  for (const char* bad : {R"("squeeze")", "3", R"({"mode":7})", R"({"recent_ratio":"x"})", R"({"recent_ratio":1.5})",
                          R"({"window":0})", R"({"important_tokens":-1})", R"({"scores":"half"})",
                          R"({"text_only_prompts":1})"}) {
    try {
      parse_look_m_option(body(bad));
      ADD_FAILURE() << "accepted " << bad;
    } catch (const RequestError& e) {
      EXPECT_EQ(e.status(), 400) << bad;
      EXPECT_EQ(e.param(), "vlm_options.look_m") << bad;
    }
  }
}

}  // namespace
}  // namespace vlm::testing
