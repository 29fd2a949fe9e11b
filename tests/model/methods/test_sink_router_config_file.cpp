// The SinkRouter config file (model/methods/sink_router_config_file.h): round trip, defaults, and a
// LoadError naming the file and the key for every kind of bad input.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "kernels/core/check.h"
#include "model/methods/sink_router_config_file.h"

namespace vlm {
namespace {

std::string write_temp(const std::string& text) {
  static int n = 0;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("sink_router_cfg_" + std::to_string(::getpid()) + "_" + std::to_string(n++) + ".json"))
                               .string();
  std::ofstream(path) << text;
  return path;
}

TEST(SinkRouterConfigFile, RoundTripsAndKeepsDefaults) {
  SinkRouterConfig c;
  c.aggregation = SinkAggregation::Mean;
  c.surrogate = SinkSurrogate::AnchorValue;
  c.num_dense_layers = 3;
  c.c0 = 0.1, c.c1 = -0.25, c.c2 = 1.5, c.c3 = -0.75;
  c.length_ref = 8192;
  c.tau_min = 0.05, c.tau_max = 0.4;
  nlohmann::json j = sink_router_config_to_json(c);
  j["model"] = "m";
  j["calibration"] = {{"anything", 1}};
  const std::string path = write_temp(j.dump());
  const SinkRouterConfig r = load_sink_router_config(path);
  std::filesystem::remove(path);
  EXPECT_EQ(r.aggregation, c.aggregation);
  EXPECT_EQ(r.surrogate, c.surrogate);
  EXPECT_EQ(r.num_dense_layers, 3);
  EXPECT_EQ(r.c0, c.c0);
  EXPECT_EQ(r.c1, c.c1);
  EXPECT_EQ(r.c2, c.c2);
  EXPECT_EQ(r.c3, c.c3);
  EXPECT_EQ(r.length_ref, 8192);
  EXPECT_EQ(r.tau_min, 0.05);
  EXPECT_EQ(r.tau_max, 0.4);
  EXPECT_EQ(r.threshold(4096), c.threshold(4096));

  const SinkRouterConfig d = sink_router_config_from_json(nlohmann::json::parse(R"({"coefficients": [0.3, 0.1]})"), "x");
  const SinkRouterConfig def;
  EXPECT_EQ(d.c0, 0.3);
  EXPECT_EQ(d.c1, 0.1);
  EXPECT_EQ(d.c2, 0.0);
  EXPECT_EQ(d.aggregation, def.aggregation);
  EXPECT_EQ(d.num_dense_layers, def.num_dense_layers);
  EXPECT_EQ(d.length_ref, def.length_ref);
  EXPECT_EQ(d.tau_max, def.tau_max);
}

TEST(SinkRouterConfigFile, BadInputsNameTheFileAndTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"coefficients": [0.3], "agregation": "min"})", "unknown key \"agregation\""},
      {R"({"aggregation": "min"})", "missing \"coefficients\""},
      {R"({"coefficients": []})", "\"coefficients\" must be an array of 1 to 4"},
      {R"({"coefficients": [1, 2, 3, 4, 5]})", "\"coefficients\" must be an array of 1 to 4"},
      {R"({"coefficients": [0.1, "x"]})", "\"coefficients\"[1]"},
      {R"({"coefficients": [0.3], "aggregation": "median"})", "\"aggregation\""},
      {R"({"coefficients": [0.3], "surrogate": 0})", "\"surrogate\""},
      {R"({"coefficients": [0.3], "num_dense_layers": -1})", "\"num_dense_layers\""},
      {R"({"coefficients": [0.3], "num_dense_layers": 1.5})", "\"num_dense_layers\""},
      {R"({"coefficients": [0.3], "length_ref": 0})", "\"length_ref\" must be > 0"},
      {R"({"coefficients": [0.3], "length_ref": "4096"})", "\"length_ref\" must be a number"},
      {R"({"coefficients": [0.3], "tau_min": 0.5, "tau_max": 0.2})", "\"tau_min\" 0.5 > \"tau_max\" 0.2"},
      {R"([1, 2])", "must be a JSON object"},
      {R"({"coefficients": [0.3],)", "invalid JSON"},
  };
  for (const auto& [text, want] : cases) {
    const std::string path = write_temp(text);
    try {
      load_sink_router_config(path);
      ADD_FAILURE() << "accepted " << text;
    } catch (const LoadError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(want), std::string::npos) << text << " -> " << msg;
    }
    std::filesystem::remove(path);
  }
  EXPECT_THROW(load_sink_router_config("/nonexistent/sink_router.json"), LoadError);
}

// The calibrated configs committed under configs/ load, and their recorded fit agrees with the
// curve they define at every calibrated length.
TEST(SinkRouterConfigFile, CommittedConfigsLoad) {
  const std::filesystem::path root = std::filesystem::path(VLM_FIXTURES_DIR) / ".." / ".." / "configs";
  int n = 0;
  for (const char* model : {"qwen2_tiny", "tiny-qwen2-demo"}) {
    const std::string path = (root / model / "sink_router.json").string();
    SCOPED_TRACE(path);
    const SinkRouterConfig c = load_sink_router_config(path);
    std::ifstream in(path);
    const nlohmann::json j = nlohmann::json::parse(in);
    for (const auto& l : j.at("calibration").at("lengths")) {
      EXPECT_NEAR(c.threshold(l.at("length").get<int64_t>()), l.at("tau_fit").get<double>(), 1e-12);
      ++n;
    }
  }
  EXPECT_GE(n, 8);
}

}  // namespace
}  // namespace vlm
