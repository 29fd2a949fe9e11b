// The processed media cache over real HTTP (Qwen2-VL fixture, real images): a chat that sends
// its image again is served from the cache (vlm:mm_processor_cache_hits_total) with the same
// greedy tokens as Hugging Face's; with --mm-processor-cache-gb 0 nothing is looked up and the
// tokens are the same. --no-enable-prefix-caching on both so that every request runs the vision
// encoder on the pixels the cache gave.
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "tests/support/qwen2vl_chat_cases.h"
#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::vector<int32_t> greedy(const ServerProcess& s, const Qwen2VLChatCase& c) {
  const ordered_json body = {{"messages", c.messages}, {"max_tokens", c.generated.size()}, {"temperature", 0},
                             {"return_token_ids", true}};
  const HttpResult r = http_request("POST", s.base_url() + "/v1/chat/completions", body.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  return json::parse(r.body)["choices"][0]["token_ids"].get<std::vector<int32_t>>();
}

int num_images(const ordered_json& messages) {
  int n = 0;
  for (const auto& m : messages)
    if (m.contains("content") && m["content"].is_array())
      for (const auto& p : m["content"]) n += p.value("type", "") == "image_url";
  return n;
}

TEST(MmProcessorCacheServer, RepeatedImagesHitAndGiveHfGreedyOnAndOff) {
  const std::string model = "qwen2_vl_chat";
  std::vector<Qwen2VLChatCase> image_cases;
  for (auto& c : qwen2vl_chat_cases(model))
    if (c.num_videos == 0 && num_images(c.messages) > 0) image_cases.push_back(c);
  ASSERT_FALSE(image_cases.empty());
  for (const char* gb : {"4", "0"}) {
    ServerProcess s(std::string(VLM_BIN_DIR) + "/vlm-server",
                    {"--model", qwen2vl_chat_model_dir(model), "--served-model-name", "qwen", "--kv-cache-dtype", "f32",
                     "--num-kv-blocks", "128", "--max-model-len", "1024", "--threads", "2", "--log-level", "warn",
                     "--no-enable-prefix-caching", "--mm-processor-cache-gb", gb});
    const bool on = std::string(gb) != "0";
    int images = 0;
    for (const auto& c : image_cases) {
      EXPECT_EQ(greedy(s, c), c.generated) << c.name << ", cache " << gb << " GiB, first time";
      const double hits = std::max(0.0, s.metric("vlm:mm_processor_cache_hits_total"));  // -1: not yet
      EXPECT_EQ(greedy(s, c), c.generated) << c.name << ", cache " << gb << " GiB, again";
      images += num_images(c.messages);
      if (on) EXPECT_EQ(s.metric("vlm:mm_processor_cache_hits_total") - hits, num_images(c.messages)) << c.name;
    }
    if (on) {
      EXPECT_EQ(s.metric("vlm:mm_processor_cache_queries_total"), 2 * images);
      EXPECT_GT(s.metric("vlm:mm_processor_cache_bytes"), 0);
    } else {
      EXPECT_EQ(s.metric("vlm:mm_processor_cache_queries_total"), -1) << "off: never looked up";
    }
  }
}

}  // namespace
}  // namespace vlm::testing
