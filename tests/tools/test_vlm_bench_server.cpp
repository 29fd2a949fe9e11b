// vlm-bench against the real vlm-server on 127.0.0.1: the demo model (random weights, Qwen3
// tokenizer) for the text workloads and arrival modes, the LLaVA fixture for random-mm. Each run's
// JSON is checked: counts, no failures, TTFT <= E2EL, token counts equal the server's usage,
// percentiles ordered.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <sys/wait.h>

#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

using nlohmann::json;

json run_bench(const std::string& base_url, const std::string& args) {
  const std::string out = ::testing::TempDir() + "vlm_bench_real.json";
  std::remove(out.c_str());
  const std::string cmd = std::string(VLM_BIN_DIR) + "/vlm-bench --base-url " + base_url + " --no-progress --timeout 120 " +
                          args + " --result-json " + out + " > /dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd;
  std::ifstream in(out);
  if (!in) {
    ADD_FAILURE() << "no result JSON from: " << cmd;
    return json::object();
  }
  return json::parse(in);
}

// The checks every run must pass.
void check_run(const json& r, int num_prompts, int output_len) {
  ASSERT_TRUE(r.contains("completed")) << r.dump().substr(0, 300);
  EXPECT_EQ(r["completed"], num_prompts);
  EXPECT_EQ(r["failed"], 0) << r["errors_first"].dump();
  EXPECT_FALSE(r["hit_deadline"].get<bool>());
  int64_t total_out = 0, total_in = 0;
  for (const auto& q : r["requests"]) {
    ASSERT_TRUE(q["success"].get<bool>()) << q.dump();
    EXPECT_LE(q["ttft_s"].get<double>(), q["e2el_s"].get<double>());
    EXPECT_EQ(q["output_tokens"], output_len) << "ignore_eos: every request makes exactly output_len tokens";
    if (r["stream"].get<bool>()) EXPECT_TRUE(q["usage_seen"].get<bool>() && q["done_seen"].get<bool>());
    total_out += q["output_tokens"].get<int64_t>();
    total_in += q["prompt_tokens"].get<int64_t>();
  }
  EXPECT_EQ(r["total_output_tokens"], total_out);
  EXPECT_EQ(r["total_input_tokens"], total_in);
  for (const char* m : {"ttft", "e2el", "itl"}) {
    const std::string k = m;
    EXPECT_LE(r["p50_" + k + "_ms"].get<double>(), r["p90_" + k + "_ms"].get<double>()) << m;
    EXPECT_LE(r["p90_" + k + "_ms"].get<double>(), r["p99_" + k + "_ms"].get<double>()) << m;
    EXPECT_LE(r["p99_" + k + "_ms"].get<double>(), r["max_" + k + "_ms"].get<double>() + 1e-9) << m;
  }
  EXPECT_GT(r["request_throughput"].get<double>(), 0);
}

class VlmBenchRealServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess(std::string(VLM_BIN_DIR) + "/vlm-server",
                                {"--model", demo_model_dir(), "--served-model-name", "demo", "--max-model-len", "1024",
                                 "--num-kv-blocks", "1024", "--log-level", "warn"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static ServerProcess* server_;
};
ServerProcess* VlmBenchRealServer::server_ = nullptr;

TEST_F(VlmBenchRealServer, RandomChatAllAtOnce) {
  check_run(run_bench(server_->base_url(), "--dataset random --num-prompts 16 --input-len 48 --output-len 8 --seed 1"), 16, 8);
}

TEST_F(VlmBenchRealServer, CompletionsTokenIdsPoissonWithConcurrencyCap) {
  const json r = run_bench(server_->base_url(),
                           "--endpoint completions --prompt-ids --dataset random --num-prompts 12 --input-len 40 "
                           "--output-len 6 --request-rate 40 --max-concurrency 4 --seed 2");
  check_run(r, 12, 6);
  EXPECT_LE(r["max_concurrent_requests"].get<int>(), 4);
  for (const auto& q : r["requests"]) EXPECT_EQ(q["prompt_tokens"], 40) << "token-id prompts have exact lengths";
}

TEST_F(VlmBenchRealServer, JsonlGammaArrivalsWithoutStreaming) {
  const std::string path = ::testing::TempDir() + "vlm_bench_real.jsonl";
  {
    std::ofstream f(path);
    for (int i = 0; i < 6; ++i)
      f << json{{"messages", {{{"role", "user"}, {"content", "Line " + std::to_string(i) + ": say something."}}}},
                {"max_tokens", 5}, {"ignore_eos", true}}.dump()
        << "\n";
  }
  check_run(run_bench(server_->base_url(), "--dataset jsonl --dataset-path " + path +
                                               " --num-prompts 6 --request-rate 30 --burstiness 0.5 --no-stream --output-len 5"),
            6, 5);
}

TEST(VlmBenchRealLlava, RandomMultimodalImages) {
  ServerProcess server(std::string(VLM_BIN_DIR) + "/vlm-server",
                       {"--model", llava_model_dir(), "--served-model-name", "llava", "--max-model-len", "512",
                        "--num-kv-blocks", "512", "--log-level", "warn"});
  const json r = run_bench(server.base_url(), "--dataset random-mm --num-prompts 6 --input-len 16 --output-len 4 "
                                              "--images-per-request 2 --image-size 48x40 --max-concurrency 3 --seed 3");
  check_run(r, 6, 4);
  for (const auto& q : r["requests"])
    EXPECT_GE(q["prompt_tokens"].get<int>(), 2 * 16) << "usage counts the 16 tokens of each image";
}

}  // namespace
}  // namespace vlm::testing
