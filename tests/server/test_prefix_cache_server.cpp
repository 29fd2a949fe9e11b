// Prefix caching over real HTTP on the demo model: the second identical chat request reports
// usage.prompt_tokens_details.cached_tokens (OpenAI's field) and the same greedy text; /metrics
// carries vLLM's vllm:prefix_cache_queries_total / hits_total; cache_salt isolates; POST
// /reset_prefix_cache empties the cache; --no-enable-prefix-caching turns it all off (the
// counters stay, at 0); the bf16-activation path caches too.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

using nlohmann::json;

std::string server_bin() { return std::string(VLM_BIN_DIR) + "/vlm-server"; }

std::vector<std::string> args(std::vector<std::string> extra) {
  std::vector<std::string> a = {"--model", demo_model_dir(), "--served-model-name", "demo", "--num-kv-blocks", "256",
                                "--max-model-len", "1024", "--kv-cache-dtype", "f32", "--log-level", "warn"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

json chat(const ServerProcess& s, const std::string& salt = "") {
  std::string text;
  for (int i = 0; i < 60; ++i) text += "word" + std::to_string(i) + " ";
  json body = {{"model", "demo"}, {"messages", {{{"role", "user"}, {"content", text}}}}, {"max_tokens", 5},
               {"temperature", 0}, {"ignore_eos", true}};
  if (!salt.empty()) body["cache_salt"] = salt;
  const HttpResult r = http_request("POST", s.base_url() + "/v1/chat/completions", body.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  return json::parse(r.body);
}

int64_t cached(const json& reply) { return reply["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(); }

TEST(PrefixCacheServer, RepeatedChatReportsCachedTokensAndMetrics) {
  ServerProcess s(server_bin(), args({}));
  const json a = chat(s);
  const int64_t P = a["usage"]["prompt_tokens"].get<int64_t>();
  EXPECT_EQ(cached(a), 0);
  const json b = chat(s);
  EXPECT_EQ(cached(b), (P - 1) / 16 * 16) << "every full block of the prompt (block size 16)";
  EXPECT_EQ(b["choices"][0]["message"]["content"], a["choices"][0]["message"]["content"]);
  EXPECT_EQ(s.metric("vllm:prefix_cache_queries_total"), static_cast<double>(2 * P));
  EXPECT_EQ(s.metric("vllm:prefix_cache_hits_total"), static_cast<double>(cached(b)));
  EXPECT_EQ(cached(chat(s, "tenant-1")), 0) << "another cache_salt shares nothing";
  EXPECT_EQ(cached(chat(s, "tenant-1")), cached(b));
  const HttpResult bad = http_request("POST", s.base_url() + "/v1/chat/completions",
                                      R"({"messages":[{"role":"user","content":"x"}],"cache_salt":""})");
  EXPECT_EQ(bad.status, 400) << bad.body;
  const HttpResult reset = http_request("POST", s.base_url() + "/reset_prefix_cache", "", {});
  EXPECT_EQ(reset.status, 200) << reset.body;
  EXPECT_EQ(cached(chat(s)), 0) << "the reset forgot every block";
}

TEST(PrefixCacheServer, NoEnablePrefixCachingTurnsItOff) {
  ServerProcess s(server_bin(), args({"--no-enable-prefix-caching"}));
  chat(s);
  EXPECT_EQ(cached(chat(s)), 0);
  // Present and 0, as vLLM exports them with caching off (absent series break rate() panels).
  EXPECT_EQ(s.metric("vllm:prefix_cache_queries_total"), 0) << "no admission queried a cache";
  EXPECT_EQ(s.metric("vllm:prefix_cache_hits_total"), 0);
  ServerProcess on(server_bin(), args({"--enable-prefix-caching"}));
  chat(on);
  EXPECT_GT(cached(chat(on)), 0);
}

// The CPU's bf16-activation path (--dtype bfloat16, the default for this bf16 checkpoint on a
// CPU with AVX512-BF16) with the prefix cache: 20 identical prompts each hit every full block
// but the last, with the same greedy text, and the server stays up. main once turned caching
// off on this path (a segfault after repeated prompts, whose cause was a thread-pool race,
// tests/kernels/core/test_thread_pool.cpp); with that workaround this test fails (0 cached).
TEST(PrefixCacheServer, RepeatedPromptsOnTheBf16ActivationPath) {
  ServerProcess s(server_bin(), args({"--dtype", "bfloat16"}));
  const json first = chat(s);
  const int64_t P = first["usage"]["prompt_tokens"].get<int64_t>();
  for (int i = 0; i < 20; ++i) {
    const json r = chat(s);
    ASSERT_EQ(cached(r), (P - 1) / 16 * 16) << "request " << i;
    ASSERT_EQ(r["choices"][0]["message"]["content"], first["choices"][0]["message"]["content"]) << "request " << i;
  }
  EXPECT_EQ(http_request("GET", s.base_url() + "/health").status, 200);
  EXPECT_EQ(s.metric("vllm:prefix_cache_hits_total"), 20.0 * static_cast<double>((P - 1) / 16 * 16));
}

}  // namespace
}  // namespace vlm::testing
