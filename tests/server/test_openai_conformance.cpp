// Client conformance (issue 46): tests/server/openai_conformance.mjs drives the real vlm-server with
// the official `openai` npm client, sending what clients send (text parts, system/developer parts,
// the tool round trip with content null and tool results, max_completion_tokens,
// stream_options.include_usage, n > 1, logprobs, response_format, images as parts), against the
// demo text model (Qwen3 tokenizer and template: string content format) and the Qwen2-VL server
// fixture (its template loops over parts: openai format).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "tests/support/qwen2vl_chat_cases.h"
#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

std::string tests_dir() { return std::string(VLM_FIXTURES_DIR) + "/.."; }

void run_conformance(const ServerProcess& server, const std::string& model, const std::string& format,
                     const std::string& image = "") {
  const CommandResult r = run_command("node " + tests_dir() + "/server/openai_conformance.mjs " + server.base_url() + " " +
                                      model + " " + format + " " + image + " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output << "\nserver log:\n" << server.log();
  EXPECT_NE(r.output.find("\"ok\":true"), std::string::npos) << r.output;
  std::printf("%s\n", r.output.c_str());
}

class OpenAiConformance : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system(("test -f " + tests_dir() + "/node_modules/openai/package.json").c_str()) != 0)
      FAIL() << "the openai package is missing: run scripts/fetch_test_data.sh";
  }
};

TEST_F(OpenAiConformance, TextModel) {
  ServerProcess server(std::string(VLM_BIN_DIR) + "/vlm-server",
                       {"--model", demo_model_dir(), "--served-model-name", "demo", "--max-model-len", "1024",
                        "--num-kv-blocks", "256", "--log-level", "warn"});
  run_conformance(server, "demo", "string");
}

TEST_F(OpenAiConformance, VisionModel) {
  ServerProcess server(std::string(VLM_BIN_DIR) + "/vlm-server",
                       {"--model", qwen2vl_chat_model_dir("qwen2_vl_chat"), "--served-model-name", "qwen", "--num-kv-blocks",
                        "256", "--max-model-len", "1024", "--threads", "2", "--log-level", "warn"});
  run_conformance(server, "qwen", "openai", std::string(VLM_FIXTURES_DIR) + "/qwen2vl_server/media/clip3_0.png");
}

// The flag overrides the detection: the Qwen2-VL fixture's template also reads string content,
// so with --chat-template-content-format string the same client cases pass, the parts now joined
// with "\n" (the script checks it through /tokenize) and the image a placeholder text.
TEST_F(OpenAiConformance, VisionModelForcedToStringFormat) {
  ServerProcess server(std::string(VLM_BIN_DIR) + "/vlm-server",
                       {"--model", qwen2vl_chat_model_dir("qwen2_vl_chat"), "--served-model-name", "qwen", "--num-kv-blocks",
                        "256", "--max-model-len", "1024", "--threads", "2", "--log-level", "warn",
                        "--chat-template-content-format", "string"});
  run_conformance(server, "qwen", "string", std::string(VLM_FIXTURES_DIR) + "/qwen2vl_server/media/clip3_0.png");
}

}  // namespace
}  // namespace vlm::testing
