// The offline tools on a Qwen3-VL checkpoint (tests/fixtures/qwen3vl/qwen3_vl_tiny, its
// language model: tools/common/language_model.h): vlm-search-patterns writes a per-head file
// of the model's shape that the loader reads back (a loose target admits sparse heads, target 0
// keeps every head dense), and vlm-calibrate-sink fits a SinkRouter config from token-id prompts
// with one sample per (decode step, routed layer, kv group); both take a Qwen3-VL-MoE checkpoint.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/methods/sink_router_config_file.h"
#include "model/methods/sparse_patterns_file.h"
#include "tests/support/qwen3vl_fixture.h"
#include "tests/support/qwen3vl_moe_checkpoint.h"
#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

namespace fs = std::filesystem;

CommandResult run(const std::string& binary, const std::string& args) {
  return run_command(std::string(VLM_BIN_DIR) + "/" + binary + " " + args + " 2>&1");
}

class Qwen3VLTools : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!qwen3vl_fixture_present()) GTEST_SKIP() << "fixture tests/fixtures/qwen3vl not generated";
    dir_ = fs::temp_directory_path() / ("vlm_qwen3vl_tools_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

TEST_F(Qwen3VLTools, SearchPatternsWritesAFileOfTheModelsShape) {
  const std::string model = qwen3vl_model_dir();
  // 3 layers, 4 query heads (config.json's text_config)
  auto search = [&](const std::string& out, const std::string& target) {
    const CommandResult r = run("vlm-search-patterns", "--model " + model + " --out " + out +
                                                           " --length 384 --block 16 --video 40:256 --threads 2"
                                                           " --target-error " + target);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return load_sparse_patterns(out);
  };
  const SparseHeadPatterns loose = search((dir_ / "loose.json").string(), "0.6");
  const SparseHeadPatterns dense = search((dir_ / "dense.json").string(), "0");
  ASSERT_EQ(loose.layers.size(), 3u);
  int sparse_heads = 0;
  for (const auto& l : loose.layers) {
    ASSERT_EQ(l.size(), 4u);
    for (const auto& h : l) sparse_heads += h.type != HeadPatternType::Dense;
  }
  EXPECT_GT(sparse_heads, 0);
  ASSERT_EQ(dense.layers.size(), 3u);
  for (const auto& l : dense.layers)
    for (const auto& h : l) EXPECT_EQ(h.type, HeadPatternType::Dense);
}

TEST_F(Qwen3VLTools, CalibrateSinkFitsAConfigFromTokenIds) {
  const std::string prompts = (dir_ / "ids.txt").string();
  std::ofstream(prompts) << "1 5 9 33 70 81 2\n\n2 100 200 17 44 1500 2047\n";
  const std::string out = (dir_ / "sink_router.json").string();
  const CommandResult r = run("vlm-calibrate-sink", "--model " + qwen3vl_model_dir() + " --prompts " + prompts +
                                                        " --prompt-format ids --lengths 64,128,192 --decode-steps 4"
                                                        " --target-skip 0.6 --out " + out + " --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const SinkRouterConfig c = load_sink_router_config(out);
  EXPECT_EQ(c.num_dense_layers, 2);
  EXPECT_EQ(c.length_ref, 192.0);
  EXPECT_LE(c.tau_min, c.tau_max);
  std::ifstream in(out);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["model"], "qwen3_vl_tiny");
  ASSERT_EQ(j["calibration"]["lengths"].size(), 3u);
  for (const auto& l : j["calibration"]["lengths"]) {
    // 2 prompts x 4 steps x 1 routed layer (of 3, 2 dense) x 2 kv groups
    EXPECT_EQ(l["samples"], 16);
    EXPECT_DOUBLE_EQ(l["skip_at_tau"].get<double>(), 10.0 / 16);
  }
}

// A Qwen3-VL-MoE checkpoint (the dense fixture's MLPs made 8 random experts, top 2:
// tests/support/qwen3vl_moe_checkpoint.h) is taken by both tools through load_language_model.
TEST_F(Qwen3VLTools, BothToolsTakeAQwen3VLMoeCheckpoint) {
  MoeCheckpointSpec spec;
  spec.identical = false;
  const MoeCheckpoint ck(spec, "tools");
  const std::string prompts = (dir_ / "ids.txt").string();
  std::ofstream(prompts) << "1 5 9 33 70 81 2\n";
  const std::string sink = (dir_ / "sink_router.json").string();
  CommandResult r = run("vlm-calibrate-sink", "--model " + ck.dir() + " --prompts " + prompts +
                                                  " --prompt-format ids --lengths 64,128 --decode-steps 2"
                                                  " --target-skip 0.6 --out " + sink + " --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(load_sink_router_config(sink).length_ref, 128.0);
  const std::string patterns = (dir_ / "patterns.json").string();
  r = run("vlm-search-patterns", "--model " + ck.dir() + " --out " + patterns +
                                     " --length 128 --block 16 --threads 2 --target-error 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(load_sparse_patterns(patterns).layers.size(), 3u);
}

}  // namespace
}  // namespace vlm::testing
