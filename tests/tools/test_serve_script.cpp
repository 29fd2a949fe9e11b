// scripts/serve.sh builds only what serving needs (issue 18: building every test and benchmark
// first took most of the ~7 minutes from a fresh clone to a serving demo on 2 cores). Run with a
// stand-in `cmake` on PATH that records its arguments, and a stand-in vlm-server in BUILD_DIR.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

namespace fs = std::filesystem;

void write_script(const fs::path& p, const std::string& body) {
  std::ofstream(p) << "#!/usr/bin/env bash\n" << body;
  fs::permissions(p, fs::perms::owner_all);
}

TEST(ServeScript, BuildsOnlyTheServingTargets) {
  const fs::path tmp = fs::temp_directory_path() / ("vlm_serve_sh_" + std::to_string(::getpid()));
  fs::create_directories(tmp / "fakebin");
  fs::create_directories(tmp / "build" / "bin");
  const fs::path log = tmp / "cmake.log";
  write_script(tmp / "fakebin" / "cmake", "echo \"$*\" >> '" + log.string() + "'\n");
  write_script(tmp / "build" / "bin" / "vlm-server", "echo \"served $*\"\n");
  const std::string repo = std::string(VLM_FIXTURES_DIR) + "/../..";
  const CommandResult r = run_command("PATH='" + (tmp / "fakebin").string() + "':\"$PATH\" BUILD_DIR='" +
                                      (tmp / "build").string() + "' MODEL_DIR=/models/m '" + repo +
                                      "/scripts/serve.sh' --threads 2 2>/dev/null");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("served --model /models/m --host 127.0.0.1 --port 8000 --threads 2"), std::string::npos)
      << r.output;
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string calls = ss.str();
  // One configure, one build of exactly the serving targets.
  EXPECT_NE(calls.find("--build " + (tmp / "build").string() + " -j"), std::string::npos) << calls;
  EXPECT_NE(calls.find("--target vlm-server vlm-random-model\n"), std::string::npos) << calls;
  size_t builds = 0;
  for (size_t p = 0; (p = calls.find("--build", p)) != std::string::npos; ++p) ++builds;
  EXPECT_EQ(builds, 1u) << calls;
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace vlm::testing
