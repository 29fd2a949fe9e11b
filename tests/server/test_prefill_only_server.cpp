// vlm-server --prefill-only-batched-tokens (issue 38; SchedulerConfig::prefill_only_batched_tokens):
// bad values are a start-up usage error (exit 2, the reason on stderr), from the command line and
// from a --config file; auto (the default; off on the CPU) and an explicit value serve the same
// greedy text and logprobs as the rule off (an 80-word prompt under a 16-token budget: chunks of
// 64 with the rule on; the engine tests check the step sizes, tests/engine/test_engine_fixtures.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>

#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

using nlohmann::json;

std::string server_bin() { return std::string(VLM_BIN_DIR) + "/vlm-server"; }

// The flags are checked before the model loads: no model directory is needed.
CommandResult start_with(const std::string& flags) {
  return run_command(server_bin() + " --model /nonexistent/model " + flags + " 2>&1 >/dev/null");
}

TEST(PrefillOnlyServer, BadValuesAreStartUpErrors) {
  struct Bad {
    std::string flags, says;
  };
  const Bad bad[] = {
      {"--prefill-only-batched-tokens 1024", "--prefill-only-batched-tokens 1024: 0 (off), auto, or at least "
                                             "--max-num-batched-tokens (2048)"},
      {"--max-num-batched-tokens 512 --prefill-only-batched-tokens 511", "at least --max-num-batched-tokens (512)"},
      {"--prefill-only-batched-tokens -1", "--prefill-only-batched-tokens"},
      {"--prefill-only-batched-tokens big", "--prefill-only-batched-tokens"},
      {"--prefill-only-batched-tokens 99999999999", "at most 16777216"},
  };
  for (const Bad& b : bad) {
    const CommandResult r = start_with(b.flags);
    EXPECT_EQ(r.exit_code, 2) << b.flags << ": " << r.output;
    EXPECT_NE(r.output.find(b.says), std::string::npos) << b.flags << ": " << r.output;
  }
  // From a --config file too (underscores as JSON keys).
  const std::string path = "/tmp/vlm_prefill_only_" + std::to_string(getpid()) + ".json";
  std::ofstream(path) << R"({"max_num_batched_tokens": 4096, "prefill_only_batched_tokens": 3000})";
  const CommandResult r = start_with("--config " + path);
  std::remove(path.c_str());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("at least --max-num-batched-tokens (4096)"), std::string::npos) << r.output;
}

TEST(PrefillOnlyServer, GoodValuesPassTheFlagCheck) {
  // Past the flag check the missing model fails the load instead: another error, not the usage one.
  for (const std::string flags : {"--prefill-only-batched-tokens auto", "--prefill-only-batched-tokens 0",
                                  "--prefill-only-batched-tokens 2048", "--prefill-only-batched-tokens 8192",
                                  "--max-num-batched-tokens 16 --prefill-only-batched-tokens 64"}) {
    const CommandResult r = start_with(flags + " --listen-while-loading off");
    EXPECT_EQ(r.output.find("prefill-only-batched-tokens"), std::string::npos) << flags << ": " << r.output;
    EXPECT_NE(r.exit_code, 0) << flags;
  }
}

std::vector<std::string> args(std::vector<std::string> extra) {
  std::vector<std::string> a = {"--model",         demo_model_dir(), "--served-model-name", "demo", "--num-kv-blocks",
                                "256",             "--max-model-len", "1024", "--kv-cache-dtype", "f32",
                                "--log-level",     "warn", "--max-num-batched-tokens", "16",
                                "--no-enable-prefix-caching"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

json complete(const ServerProcess& s, const std::string& prompt, int max_tokens) {
  const json body = {{"model", "demo"},   {"prompt", prompt},   {"max_tokens", max_tokens},
                     {"temperature", 0},  {"ignore_eos", true}, {"logprobs", 3}};
  const HttpResult r = http_request("POST", s.base_url() + "/v1/completions", body.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  return json::parse(r.body);
}

TEST(PrefillOnlyServer, SameTextAndLogprobsWithTheRuleOnAndOff) {
  std::string longp;
  for (int i = 0; i < 80; ++i) longp += "word" + std::to_string(i) + " ";
  std::vector<json> replies;
  for (const std::string po : {"0", "64", "auto"}) {
    ServerProcess s(server_bin(), args({"--prefill-only-batched-tokens", po}));
    replies.push_back(complete(s, longp, 8));
  }
  const json& off = replies[0]["choices"][0];
  for (size_t k = 1; k < replies.size(); ++k) {
    const json& on = replies[k]["choices"][0];
    EXPECT_EQ(on["text"], off["text"]) << k;
    const json &a = off["logprobs"]["token_logprobs"], &b = on["logprobs"]["token_logprobs"];
    ASSERT_EQ(a.size(), b.size());
    for (size_t t = 0; t < a.size(); ++t) EXPECT_NEAR(a[t].get<double>(), b[t].get<double>(), 1e-4) << k << " " << t;
  }
  EXPECT_GT(replies[0]["usage"]["prompt_tokens"].get<int>(), 64) << "the prompt spans several big chunks";
}

}  // namespace
}  // namespace vlm::testing
