// The official `openai` npm client (a real client nobody here wrote) against the real vlm-server:
// models, chat (whole and streaming), completions and an error, all in tests/server/openai_client.mjs.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <sys/wait.h>

#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

TEST(OpenAiClient, ChatStreamingCompletionsAndModels) {
  const std::string tests_dir = std::string(VLM_FIXTURES_DIR) + "/..";
  if (std::system(("test -f " + tests_dir + "/node_modules/openai/package.json").c_str()) != 0)
    FAIL() << "the openai package is missing: run scripts/fetch_test_data.sh";
  ServerProcess server(std::string(VLM_BIN_DIR) + "/vlm-server",
                       {"--model", demo_model_dir(), "--served-model-name", "demo", "--max-model-len", "1024",
                        "--num-kv-blocks", "256", "--log-level", "warn"});
  const std::string cmd = "node " + tests_dir + "/server/openai_client.mjs " + server.base_url() + " demo 2>&1";
  const CommandResult r = run_command(cmd);
  const std::string& out = r.output;
  EXPECT_EQ(r.exit_code, 0) << out << "\nserver log:\n" << server.log();
  EXPECT_NE(out.find("\"ok\":true"), std::string::npos) << out;
}

}  // namespace
}  // namespace vlm::testing
