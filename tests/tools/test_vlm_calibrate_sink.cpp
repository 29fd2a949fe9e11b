// vlm-calibrate-sink as a user runs it: it calibrates a fixture model from token-id prompts and
// writes a config that load_sink_router_config reads back with its report; bad arguments and
// inputs fail with a clear message (exit 2); and a demo model (4 layers, Qwen3 tokenizer)
// calibrated from text prompts serves with the written config: vlm-server starts with
// --sink-router-config FILE, routes decode groups (metrics) and rejects a broken config file.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/methods/sink_router_config_file.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

namespace fs = std::filesystem;

using Result = CommandResult;  // output: stdout and stderr

Result run(const std::string& binary, const std::string& args) {
  return run_command(std::string(VLM_BIN_DIR) + "/" + binary + " " + args + " 2>&1");
}

class VlmCalibrateSink : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("vlm_calib_sink_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string file(const std::string& name, const std::string& text) const {
    const std::string p = (dir_ / name).string();
    std::ofstream(p) << text;
    return p;
  }
  fs::path dir_;
};

TEST_F(VlmCalibrateSink, CalibratesAFixtureModelFromTokenIds) {
  const std::string prompts = file("ids.txt", "1 5 9 33 70 81 2\n\n2 100 200 17 44\n");
  const std::string out = (dir_ / "cfg" / "sink_router.json").string();  // parent is created
  const Result r = run("vlm-calibrate-sink",
                       "--model " + fixture_model_dir("qwen2_tiny") + " --prompts " + prompts +
                           " --prompt-format ids --lengths 64,128,192,256,320 --decode-steps 4 --target-skip 0.6"
                           " --out " + out + " --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("oracle sink = group first-token attention mass (min over the group) >= 0.500"),
            std::string::npos) << r.output;
  const SinkRouterConfig c = load_sink_router_config(out);
  EXPECT_EQ(c.num_dense_layers, 2);
  EXPECT_EQ(c.length_ref, 320.0);
  EXPECT_LE(c.tau_min, c.tau_max);
  std::ifstream in(out);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["model"], "qwen2_tiny");
  const auto& cal = j["calibration"];
  EXPECT_EQ(cal["target_skip"], 0.6);
  EXPECT_EQ(cal["fit_degree"], 3);
  ASSERT_EQ(cal["lengths"].size(), 5u);
  for (const auto& l : cal["lengths"]) {
    // 2 prompts x 4 steps x 1 routed layer x 2 kv groups = 16 samples: the per-length tau
    // realizes round(0.6 * 16) / 16 exactly.
    EXPECT_EQ(l["samples"], 16);
    EXPECT_DOUBLE_EQ(l["skip_at_tau"].get<double>(), 10.0 / 16);
    EXPECT_DOUBLE_EQ(c.threshold(l["length"].get<int64_t>()), l["tau_fit"].get<double>());
    for (const char* k : {"precision", "recall", "f1", "auprc"}) {
      EXPECT_GE(l["oracle_mass_threshold"][k].get<double>(), 0.0);
      EXPECT_LE(l["oracle_mass_threshold"][k].get<double>(), 1.0);
    }
  }
}

TEST_F(VlmCalibrateSink, BadInputsFailClearly) {
  const std::string model = fixture_model_dir("qwen2_tiny");  // 3 layers, 512 positions, 384 ids
  const std::string ok = file("ok.txt", "1 5 9 33\n");
  const std::string common = "--model " + model + " --prompt-format ids --decode-steps 1 --out " +
                             (dir_ / "x.json").string();
  const std::string base = common + " --lengths 32";
  const struct {
    std::string args;
    int exit_code;
    std::string message;
  } cases[] = {
      {"--model " + model, 2, "--prompts is required"},
      {base + " --prompts " + ok + " --target-skip 1.5", 2, "--target-skip needs a number in [0, 1]"},
      {base + " --prompts " + ok + " --layers-skip 3", 2, "the model has 3 layers, none would be routed"},
      {common + " --prompts " + ok + " --lengths 512", 2, "512 plus 1 decode step(s) exceeds the model's max_position_embeddings (512)"},
      {common + " --prompts " + ok + " --lengths 32,32", 2, "--lengths: 32 given twice"},
      {common + " --prompts " + ok + " --lengths 1", 2, "--lengths needs an integer >= 2"},
      {base + " --prompts " + ok + " --aggregation median", 2, "--aggregation must be min, mean or max"},
      {base + " --prompts " + ok + " --bogus 1", 2, "unknown flag --bogus"},
      {base + " --prompts " + (dir_ / "missing.txt").string(), 2, "cannot open --prompts"},
      {base + " --prompts " + file("empty.txt", "\n  \n"), 2, "has no prompts"},
      {base + " --prompts " + file("oov.txt", "1 2 999\n"), 2, "line 1: '999' is not a token id in [0, 384)"},
      {base + " --prompts " + file("short.txt", "1 5 9\n7\n"), 2, "prompt 2 has 1 token(s)"},
      {"--model " + model + " --prompts " + ok + " --lengths 32", 2, "has no tokenizer.json"},
      {"--model " + (dir_ / "nope").string() + " --prompts " + ok, 2, "is not a directory"},
      {"--model " + dir_.string() + " --prompts " + ok, 1, "config.json"},
  };
  for (const auto& c : cases) {
    const Result r = run("vlm-calibrate-sink", c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.args << "\n" << r.output;
  }
  EXPECT_FALSE(fs::exists(dir_ / "x.json"));
}

double metric(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + "{");
  if (at == std::string::npos) return -1;
  const size_t sp = text.find("} ", at);
  return std::stod(text.substr(sp + 2, text.find('\n', sp) - sp - 2));
}

TEST_F(VlmCalibrateSink, ServerRoutesWithTheCalibratedConfig) {
  const std::string model = (dir_ / "demo4").string();
  const Result made = run("vlm-random-model", "--preset tiny-qwen2 --layers 4 --std 0.3 --seed 1 --out " + model +
                                                  " --tokenizer-from " + VLM_FIXTURES_DIR + "/../data/tokenizers/qwen3");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::string prompts = file("text.txt",
                                   "The quick brown fox jumps over the lazy dog.\n"
                                   "A paged KV cache keeps each sequence's keys and values in fixed-size blocks.\n");
  const std::string out = (dir_ / "sink_router.json").string();
  const Result r = run("vlm-calibrate-sink", "--model " + model + " --prompts " + prompts +
                                                 " --lengths 32,64,96,128 --decode-steps 4 --target-skip 0.6 --out " + out +
                                                 " --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(out))["model"], "demo4");

  ServerProcess server(std::string(VLM_BIN_DIR) + "/vlm-server",
                       {"--model", model, "--served-model-name", "demo", "--sink-router", "on",
                        "--sink-router-config", out, "--threads", "2", "--kv-cache-memory-gib", "0.05"});
  const nlohmann::json body = {{"model", "demo"},
                               {"prompt", "A paged KV cache keeps each sequence's keys and values in fixed-size blocks, "
                                          "and the scheduler batches the decode steps of many sequences."},
                               {"max_tokens", 16}, {"temperature", 0}, {"ignore_eos", true}};
  const HttpResult c = http_request("POST", server.base_url() + "/v1/completions", body.dump());
  ASSERT_EQ(c.status, 200) << c.body;
  // The engine publishes its counters after the step that finished the request: poll briefly.
  std::string m;
  double routed = -1, skipped = -1;
  for (int i = 0; i < 200 && routed != 15 * 2 * 2; ++i) {
    if (i) ::usleep(10000);
    m = http_request("GET", server.base_url() + "/metrics").body;
    routed = metric(m, "vlm:sink_router_groups_routed_total");
    skipped = metric(m, "vlm:sink_router_groups_skipped_total");
  }
  // 15 routed decode steps (the first token comes from prefill) x 2 routed layers x 2 kv groups.
  EXPECT_EQ(routed, 15 * 2 * 2) << m;
  EXPECT_GE(skipped, 0) << m;
  EXPECT_LE(skipped, routed);
  // The request's usage reports the same decisions (it was the only request).
  const nlohmann::json usage = nlohmann::json::parse(c.body)["usage"];
  ASSERT_TRUE(usage.contains("vlm")) << c.body;
  EXPECT_EQ(usage["vlm"]["sink_groups_routed"].get<double>(), routed);
  EXPECT_EQ(usage["vlm"]["sink_groups_skipped"].get<double>(), skipped);
  EXPECT_DOUBLE_EQ(usage["vlm"]["sink_groups_skipped_ratio"].get<double>(), skipped / routed);
  std::printf("  served with the calibrated config: %g of %g groups skipped\n", skipped, routed);
  EXPECT_EQ(server.terminate(), 0);

  // A broken config stops the server at start-up with the file and the key named.
  const std::string bad = file("bad.json", R"({"coefficients": [0.2], "tau_mn": 0})");
  const Result b = run("vlm-server", "--model " + model + " --sink-router-config " + bad + " --port 0");
  EXPECT_EQ(b.exit_code, 1) << b.output;
  EXPECT_NE(b.output.find(bad + ": unknown key \"tau_mn\""), std::string::npos) << b.output;
}

}  // namespace
}  // namespace vlm::testing
