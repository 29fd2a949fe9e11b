// vlm-bench against servers without a vLLM-style /tokenize (issue 18): a fake server with
// llama.cpp's /tokenize shape ({"content"} -> {"tokens"}) sizes prompts through it; one with no
// /tokenize at all sizes them with --tokenizer DIR (a Hugging Face tokenizer read by our own
// library: the prompts sent tokenize to --input-len tokens), or else estimates and says so.
// --no-ignore-eos leaves ignore_eos out of the requests; --ignore-eos (vLLM bench's flag) is
// accepted.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/tokenizer/tokenizer.h"
#include "tests/support/server_process.h"
#include "tests/tools/fake_openai_server.h"

namespace vlm::testing {
namespace {

using nlohmann::json;

struct BenchRun {
  int exit_code;
  std::string output;
  json result;
};

BenchRun bench(const std::string& args) {
  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / ("vlm_bench_tok_" + std::to_string(::getpid()) + ".json")).string();
  std::filesystem::remove(path);
  CommandResult c = run_command(std::string(VLM_BIN_DIR) + "/vlm-bench --no-progress --result-json " + path + " " +
                                args + " 2>&1");
  BenchRun r{c.exit_code, std::move(c.output), nullptr};
  std::ifstream f(path);
  if (f) r.result = json::parse(f);
  return r;
}

std::string prompt_text(const json& body) {
  if (body.contains("prompt")) return body["prompt"].get<std::string>();
  const json& content = body["messages"][0]["content"];
  return content.is_string() ? content.get<std::string>() : content[0]["text"].get<std::string>();
}

TEST(VlmBenchTokenizers, LlamaCppTokenizeShape) {
  FakeOpenAiServer server({}, FakeTokenize::LlamaCpp);
  const BenchRun r = bench("--base-url " + server.base_url() + " --num-prompts 6 --input-len 40 --output-len 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.result["prompt_calibration"], "matched via /tokenize (llama.cpp)");
  for (const json& q : r.result["requests"]) EXPECT_NEAR(q["prompt_tokens"].get<int>(), 40, 2);
}

TEST(VlmBenchTokenizers, NoTokenizeUsesLocalTokenizer) {
  FakeOpenAiServer server({}, FakeTokenize::None);
  const std::string tok_dir = std::string(VLM_FIXTURES_DIR) + "/../data/tokenizers/qwen3";
  const BenchRun r = bench("--base-url " + server.base_url() + " --endpoint completions --num-prompts 5 --input-len 300 "
                      "--output-len 4 --tokenizer " + tok_dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.result["prompt_calibration"], "matched via --tokenizer");
  const auto tok = Tokenizer::load(tok_dir);
  const auto bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 5u);
  for (const auto& b : bodies) {
    const int n = static_cast<int>(tok->encode(prompt_text(json::parse(b)), false).size());
    EXPECT_NEAR(n, 300, 1) << "the prompt as the local tokenizer counts it";
  }
  // --prompt-ids takes its ids from the local tokenizer too: exact lengths.
  const BenchRun ids = bench("--base-url " + server.base_url() + " --endpoint completions --prompt-ids --num-prompts 3 "
                        "--input-len 64 --output-len 2 --tokenizer " + tok_dir);
  ASSERT_EQ(ids.exit_code, 0) << ids.output;
  const auto all = server.bodies();
  for (size_t i = 5; i < all.size(); ++i) EXPECT_EQ(json::parse(all[i])["prompt"].size(), 64u);
}

TEST(VlmBenchTokenizers, NoTokenizeEstimatesAndSaysSo) {
  FakeOpenAiServer server({}, FakeTokenize::None);
  const BenchRun r = bench("--base-url " + server.base_url() + " --num-prompts 2 --input-len 16 --output-len 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.result["prompt_calibration"], "estimated (no /tokenize)");
  EXPECT_NE(r.output.find("did not answer"), std::string::npos) << r.output;
}

TEST(VlmBenchTokenizers, IgnoreEosFlags) {
  FakeOpenAiServer server;
  ASSERT_EQ(bench("--base-url " + server.base_url() + " --num-prompts 2 --input-len 8 --output-len 2 --no-ignore-eos")
                .exit_code,
            0);
  ASSERT_EQ(bench("--base-url " + server.base_url() + " --num-prompts 2 --input-len 8 --output-len 2 --ignore-eos")
                .exit_code,
            0);
  const auto bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 4u);
  for (int i = 0; i < 2; ++i) EXPECT_FALSE(json::parse(bodies[i]).contains("ignore_eos")) << bodies[i];
  for (int i = 2; i < 4; ++i) EXPECT_EQ(json::parse(bodies[i])["ignore_eos"], true) << bodies[i];
}

}  // namespace
}  // namespace vlm::testing
