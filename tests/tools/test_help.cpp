// Every tool's --help (and -h) prints its usage to stdout and exits 0; a bad flag still exits 2
// with the error on stderr (issue 18).
#include <gtest/gtest.h>

#include <string>

#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

const char* const kTools[] = {"vlm-server", "vlm-generate", "vlm-tokenize", "vlm-bench",
                              "vlm-random-model", "vlm-search-patterns", "vlm-calibrate-sink"};

TEST(ToolHelp, HelpGoesToStdoutAndExitsZero) {
  for (const char* tool : kTools) {
    for (const char* flag : {"--help", "-h"}) {
      const std::string bin = std::string(VLM_BIN_DIR) + "/" + tool;
      const CommandResult r = run_command(bin + " " + flag + " 2>/dev/null");
      EXPECT_EQ(r.exit_code, 0) << tool << " " << flag;
      EXPECT_NE(r.output.find("usage"), std::string::npos) << tool << " " << flag << ": " << r.output;
      EXPECT_EQ(r.output.rfind("error:", 0), std::string::npos) << tool << " " << flag << ": " << r.output;
      const CommandResult err = run_command(bin + " " + flag + " 2>&1 >/dev/null");
      EXPECT_EQ(err.output, "") << tool << " " << flag << " wrote to stderr";
    }
  }
}

TEST(ToolHelp, UnknownFlagStillFails) {
  for (const char* tool : kTools) {
    const CommandResult r = run_command(std::string(VLM_BIN_DIR) + "/" + tool + " --no-such-flag x 2>&1 >/dev/null");
    EXPECT_EQ(r.exit_code, 2) << tool;
    EXPECT_FALSE(r.output.empty()) << tool << ": no error on stderr";
  }
}

}  // namespace
}  // namespace vlm::testing
