// What a new user meets first (issue 18): GET /v1/models answers 503 while the model loads, as
// /health and every other route do (with Retry-After, issue 46); usage.vlm.prefill_attention_density and the histogram
// vlm:prefill_attention_density report a sparse-prefilled prompt (absent for a dense one).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string server_bin() { return std::string(VLM_BIN_DIR) + "/vlm-server"; }

// The model's generation_config.json is a named pipe: the server's load blocks reading it until
// the test writes it, so "while loading" is a state the test holds, not a race.
TEST(FirstContact, ModelsAnswers503WhileLoading) {
  ::signal(SIGPIPE, SIG_IGN);
  const fs::path dir = fs::temp_directory_path() / ("vlm_fifo_model_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(demo_model_dir()))
    if (e.path().filename() != "generation_config.json") fs::copy_file(e.path(), dir / e.path().filename());
  const std::string fifo = (dir / "generation_config.json").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::atomic<bool> done{false};
  std::thread writer;
  {
    ServerProcess s(server_bin(), {"--model", dir.string(), "--served-model-name", "demo", "--num-kv-blocks", "64",
                                   "--max-model-len", "512", "--log-level", "warn"},
                    60, "loading");
    HttpResult models = http_request("GET", s.base_url() + "/v1/models");
    EXPECT_EQ(models.status, 503) << models.body;
    EXPECT_NE(models.body.find("loading"), std::string::npos) << models.body;
    EXPECT_EQ(http_request("GET", s.base_url() + "/health").status, 503);
    // Every route (issue 46: chat answered 404 "no route" while loading): 503 in the OpenAI
    // envelope with Retry-After, which clients and load balancers retry.
    const std::string chat = R"({"model": "demo", "messages": [{"role": "user", "content": "hi"}]})";
    for (const auto& [method, path, body] : std::vector<std::tuple<std::string, std::string, std::string>>{
             {"POST", "/v1/chat/completions", chat}, {"POST", "/v1/completions", R"({"prompt": "hi"})"},
             {"POST", "/tokenize", R"({"prompt": "hi"})"}, {"POST", "/detokenize", R"({"tokens": [1]})"},
             {"GET", "/v1/models", ""}, {"GET", "/health", ""}, {"GET", "/metrics", ""}, {"GET", "/version", ""},
             {"POST", "/reset_prefix_cache", ""}, {"GET", "/v1/chat/completions", ""}}) {
      SCOPED_TRACE(method + " " + path);
      const HttpResult r = http_request(method, s.base_url() + path, body);
      EXPECT_EQ(r.status, 503) << r.body;
      const json e = json::parse(r.body);
      EXPECT_EQ(e["error"]["type"], "unavailable_error");
      EXPECT_EQ(e["error"]["code"], 503);
      EXPECT_EQ(e["error"]["message"], "model is loading");
      EXPECT_NE(r.headers.find("Retry-After: 5"), std::string::npos) << r.headers;
    }
    // Feed the pipe to every reader until the server is ready (bounded: 60 s).
    writer = std::thread([&] {
      const std::string content = "{}";
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!done && std::chrono::steady_clock::now() < deadline) {
        const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // ENXIO until a reader waits
        if (fd >= 0) {
          ::fcntl(fd, F_SETFL, 0);
          (void)!::write(fd, content.data(), content.size());
          ::close(fd);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
    long status = 0;
    for (int i = 0; i < 600 && status != 200; ++i) {
      status = http_request("GET", s.base_url() + "/v1/models", "", {}, 2000).status;
      if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(status, 200) << s.log();
    done = true;
    writer.join();
    const HttpResult ready = http_request("GET", s.base_url() + "/v1/models");
    ASSERT_EQ(ready.status, 200);
    EXPECT_EQ(json::parse(ready.body)["data"][0]["id"], "demo");
  }
  fs::remove_all(dir);
}

// Every head of the demo model runs A-shape with one sink block and a 64-key local window
// (blocks of 64): over a 400-token prompt (7 query blocks, the last partial) query block m
// computes min(m + 1, 3) key blocks of its m + 1 causal ones, 1 + 2 + 5 * 3 = 18 of 28.
class DensityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const json cfg = json::parse(std::ifstream(demo_model_dir() + "/config.json"));
    json layers = json::array();
    for (int l = 0; l < cfg["num_hidden_layers"].get<int>(); ++l) {
      json heads = json::object();
      for (int h = 0; h < cfg["num_attention_heads"].get<int>(); ++h)
        heads[std::to_string(h)] = {{"boundary", "none"}, {"pattern", {"a_shape", 64, 64}}};
      layers.push_back(heads);
    }
    patterns_ = (fs::temp_directory_path() / ("vlm_density_patterns_" + std::to_string(::getpid()) + ".json")).string();
    std::ofstream(patterns_) << json{{"version", 1}, {"model", "demo"}, {"layers", layers}}.dump();
    server_ = new ServerProcess(server_bin(), {"--model", demo_model_dir(), "--served-model-name", "demo",
                                               "--num-kv-blocks", "128", "--max-model-len", "1024",
                                               "--sparse-prefill-min-len", "64", "--sparse-prefill-config",
                                               patterns_, "--sparse-prefill", "off", "--threads", "2",
                                               "--log-level", "warn"});
  }
  static void TearDownTestSuite() {
    delete server_;
    fs::remove(patterns_);
  }
  static json complete(const std::string& method, bool stream) {
    std::vector<int> prompt;
    for (int i = 0; i < 400; ++i) prompt.push_back(1000 + (i * 37) % 5000);
    json body = {{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0},
                 {"vlm_options", {{"sparse_prefill", method}}}};
    if (stream) body.update({{"stream", true}, {"stream_options", {{"include_usage", true}}}});
    HttpResult r = http_request("POST", server_->base_url() + "/v1/completions", body.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    if (!stream) return json::parse(r.body)["usage"];
    json usage;
    for (size_t pos = 0; (pos = r.body.find("data: {", pos)) != std::string::npos; ++pos) {
      const json chunk = json::parse(r.body.substr(pos + 6, r.body.find("\n\n", pos) - pos - 6));
      if (chunk.contains("usage") && !chunk["usage"].is_null()) usage = chunk["usage"];
    }
    return usage;
  }
  static double histogram_count() {
    const std::string text = http_request("GET", server_->base_url() + "/metrics").body;
    std::smatch m;
    const std::regex count(R"(vlm:prefill_attention_density_count\{[^}]*\} ([0-9.]+))");
    return std::regex_search(text, m, count) ? std::stod(m[1]) : 0.0;
  }
  static ServerProcess* server_;
  static std::string patterns_;
};
ServerProcess* DensityTest::server_ = nullptr;
std::string DensityTest::patterns_;

TEST_F(DensityTest, SparsePrefillReportsDensityInUsageAndMetric) {
  const double before = histogram_count();
  const json u = complete("mminference", false);
  ASSERT_TRUE(u.contains("vlm")) << u.dump();
  const double d = u["vlm"]["prefill_attention_density"].get<double>();
  EXPECT_DOUBLE_EQ(d, 18.0 / 28.0);
  const json us = complete("mminference", true);  // the final streaming usage chunk carries it too
  ASSERT_TRUE(us.contains("vlm")) << us.dump();
  EXPECT_DOUBLE_EQ(us["vlm"]["prefill_attention_density"].get<double>(), d);
  EXPECT_EQ(histogram_count(), before + 2);
  const std::string text = http_request("GET", server_->base_url() + "/metrics").body;
  EXPECT_NE(text.find("# TYPE vlm:prefill_attention_density histogram"), std::string::npos);
}

TEST_F(DensityTest, DensePromptHasNoDensity) {
  const double before = histogram_count();
  const json u = complete("off", false);
  EXPECT_FALSE(u.contains("vlm") && u["vlm"].contains("prefill_attention_density")) << u.dump();
  EXPECT_EQ(histogram_count(), before);
}

}  // namespace
}  // namespace vlm::testing
