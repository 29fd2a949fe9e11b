// vlm-generate as a user runs it: the printed greedy tokens equal Hugging Face's, bad arguments
// give a usage error (exit 2), and a broken model directory a load error naming the file (exit 1).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <sys/wait.h>

#include "tests/support/decoder_harness.h"

namespace vlm::testing {
namespace {

struct Result {
  int exit_code;
  std::string output;  // stdout and stderr
};

Result run(const std::string& args) {
  const std::string cmd = std::string(VLM_BIN_DIR) + "/vlm-generate " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

TEST(VlmGenerate, PrintsHuggingFaceGreedyTokens) {
  for (const char* model : {"qwen2_tiny", "llama3_tiny"}) {
    Reference ref = load_reference(model);
    const std::vector<int32_t> want = ref.greedy(2);
    const Result r = run("--model " + fixture_model_dir(model) + " --prompt-ids " + join(ref.ids(2)) +
                         " --max-tokens " + std::to_string(want.size()) +
                         " --ignore-eos --chunk-size 16 --threads 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("generated: " + join(want) + "\n"), std::string::npos) << r.output;
  }
}

TEST(VlmGenerate, BadArgumentsAreUsageErrors) {
  Result r = run("--prompt-ids 1,2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--model is required"), std::string::npos) << r.output;
  r = run("--model x --prompt-ids 1,,2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--prompt-ids needs an integer"), std::string::npos) << r.output;
  r = run("--model " + fixture_model_dir("qwen2_tiny") + " --prompt-ids 1,99999");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("prompt id 99999 >= vocab size 384"), std::string::npos) << r.output;
}

TEST(VlmGenerate, MissingModelIsALoadError) {
  const Result r = run("--model /nonexistent/dir --prompt-ids 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("/nonexistent/dir/config.json: cannot open"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace vlm::testing
