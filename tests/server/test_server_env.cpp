// vlm-server's container-facing options (issue 14): flags from VLM_SERVER_* environment variables
// (command line > environment > --config) and --listen-while-loading off (the port opens only once
// the model is loaded, for load balancers that only check passively).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

using nlohmann::json;

std::string server_bin() { return std::string(VLM_BIN_DIR) + "/vlm-server"; }

// Sets an environment variable for the scope (children inherit it), then removes it.
struct ScopedEnv {
  std::string name;
  ScopedEnv(const std::string& n, const std::string& v) : name(n) { setenv(n.c_str(), v.c_str(), 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

std::string served_id(const ServerProcess& s) {
  const HttpResult r = http_request("GET", s.base_url() + "/v1/models");
  EXPECT_EQ(r.status, 200) << r.body;
  return json::parse(r.body)["data"][0]["id"].get<std::string>();
}

TEST(ServerEnv, FlagsComeFromTheEnvironmentAndTheCommandLineWins) {
  ScopedEnv model("VLM_SERVER_MODEL", demo_model_dir());
  ScopedEnv name("VLM_SERVER_SERVED_MODEL_NAME", "from-env");
  ScopedEnv blocks("VLM_SERVER_NUM_KV_BLOCKS", "64");
  ScopedEnv len("VLM_SERVER_MAX_MODEL_LEN", "512");
  {
    ServerProcess s(server_bin(), {"--log-level", "warn"});  // no --model: VLM_SERVER_MODEL gives it
    EXPECT_EQ(served_id(s), "from-env");
    EXPECT_EQ(http_request("GET", s.base_url() + "/health").status, 200);
  }
  ServerProcess s(server_bin(), {"--served-model-name", "from-flag", "--log-level", "warn"});
  EXPECT_EQ(served_id(s), "from-flag");
}

TEST(ServerEnv, BadEnvironmentValueIsAUsageError) {
  ScopedEnv model("VLM_SERVER_MODEL", demo_model_dir());
  ScopedEnv bad("VLM_SERVER_LISTEN_WHILE_LOADING", "maybe");
  try {
    ServerProcess s(server_bin(), {"--num-kv-blocks", "64", "--max-model-len", "512"}, 30);
    ADD_FAILURE() << "the server started with VLM_SERVER_LISTEN_WHILE_LOADING=maybe";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--listen-while-loading must be on or off"), std::string::npos) << e.what();
  }
}

TEST(ServerEnv, BadContentFormatIsAUsageError) {
  try {
    ServerProcess s(server_bin(), {"--model", demo_model_dir(), "--chat-template-content-format", "list"}, 30);
    ADD_FAILURE() << "the server started with --chat-template-content-format list";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--chat-template-content-format must be auto, string or openai"),
              std::string::npos)
        << e.what();
  }
}

TEST(ServerEnv, ListenWhileLoadingOffServes) {
  // The port opens after the load (tests/scaleout/replica_test.py restarts replicas this way
  // behind nginx); here: the flag is accepted and the server serves.
  ServerProcess s(server_bin(), {"--model", demo_model_dir(), "--served-model-name", "demo", "--num-kv-blocks", "64",
                                 "--max-model-len", "512", "--listen-while-loading", "off", "--log-level", "warn"});
  EXPECT_EQ(http_request("GET", s.base_url() + "/health").status, 200);
  EXPECT_EQ(served_id(s), "demo");
}

}  // namespace
}  // namespace vlm::testing
