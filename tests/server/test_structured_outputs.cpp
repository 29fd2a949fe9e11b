// Structured outputs and tool calls end to end (tests/server/structured_outputs.mjs): the real
// vlm-server on a random-weight demo model, json-schema-test-suite schemas validated by ajv,
// regex / choice / grammar / json_object, and tool_calls through the official openai client.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

TEST(StructuredOutputs, SuiteSchemasRegexChoiceGrammarAndToolCalls) {
  const std::string tests_dir = std::string(VLM_FIXTURES_DIR) + "/..";
  for (const char* pkg : {"openai", "ajv", "json-schema-test-suite"})
    if (std::system(("test -f " + tests_dir + "/node_modules/" + pkg + "/package.json").c_str()) != 0)
      FAIL() << "the " << pkg << " package is missing: run scripts/fetch_test_data.sh";
  ServerProcess server(std::string(VLM_BIN_DIR) + "/vlm-server",
                       {"--model", demo_model_dir(), "--served-model-name", "demo", "--max-model-len", "1024",
                        "--num-kv-blocks", "512", "--log-level", "warn"});
  const CommandResult r = run_command("node " + tests_dir + "/server/structured_outputs.mjs " + server.base_url() + " demo 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output << "\nserver log:\n" << server.log();
  EXPECT_NE(r.output.find("\"ok\":true"), std::string::npos) << r.output;
  std::printf("%s\n", r.output.c_str());
}

}  // namespace
}  // namespace vlm::testing
