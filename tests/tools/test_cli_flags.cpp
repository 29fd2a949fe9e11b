// tools/common/cli_flags: the flag syntax every vlm-* tool shares, and its usage errors (exit 2
// with the error and the flag table on stderr).
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "tools/common/cli_flags.h"

namespace vlm::cli {
namespace {

const FlagParser kParser("tool --model DIR [flags]", {{"model", "model directory"}, {"threads", "compute threads"}});

std::map<std::string, std::string> parse(std::vector<std::string> args, bool last_wins = false) {
  args.insert(args.begin(), "tool");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return kParser.parse(static_cast<int>(argv.size()), argv.data(), last_wins);
}

TEST(CliFlags, ParsesBothSpellings) {
  const auto f = parse({"--model", "/m", "--threads=3"});
  EXPECT_EQ(f.at("model"), "/m");
  EXPECT_EQ(f.at("threads"), "3");
  EXPECT_EQ(parse({"--model=a=b"}).at("model"), "a=b");  // only the first '=' splits
  EXPECT_EQ(parse({"--model", "a", "--model", "b"}, /*last_wins=*/true).at("model"), "b");
}

TEST(CliFlags, UsageErrorsExitTwoWithTheTable) {
  const auto usage = ::testing::ExitedWithCode(2);
  EXPECT_EXIT(parse({"--modle", "x"}), usage, "unknown flag --modle(.|\n)*--model +model directory");
  EXPECT_EXIT(parse({"--model"}), usage, "--model needs a value");
  EXPECT_EXIT(parse({"stray"}), usage, "unexpected argument 'stray'");
  EXPECT_EXIT(parse({"--model", "a", "--model", "b"}), usage, "--model given twice");
}

TEST(CliFlags, HelpPrintsToStdoutAndExitsZero) {
  // stderr stays empty (the usage goes to stdout; tests/tools/test_help.cpp reads it there).
  EXPECT_EXIT(parse({"--help"}), ::testing::ExitedWithCode(0), "^$");
  EXPECT_EXIT(parse({"--model", "a", "-h"}), ::testing::ExitedWithCode(0), "^$");
}

TEST(CliFlags, NumbersAreWholeAndInRange) {
  EXPECT_EQ(kParser.integer("threads", "12", 1), 12);
  EXPECT_EQ(kParser.integer("threads", "-3", -5), -3);
  EXPECT_DOUBLE_EQ(kParser.number("r", "0.25", 0, 1), 0.25);
  EXPECT_DOUBLE_EQ(kParser.number("r", "1", 0, 1), 1.0);
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_DOUBLE_EQ(kParser.number("t", "1e3", 0, inf, true), 1000.0);
  const auto usage = ::testing::ExitedWithCode(2);
  EXPECT_EXIT(kParser.integer("threads", "0", 1), usage, "--threads needs an integer >= 1, got '0'");
  EXPECT_EXIT(kParser.integer("threads", "4x", 1), usage, "got '4x'");
  EXPECT_EXIT(kParser.integer("threads", "", 1), usage, "needs an integer");
  EXPECT_EXIT(kParser.integer("threads", "99999999999999999999", 1), usage, "needs an integer");
  EXPECT_EXIT(kParser.number("r", "1.5", 0, 1), usage, "--r needs a number in \\[0, 1\\], got '1.5'");
  EXPECT_EXIT(kParser.number("t", "0", 0, inf, true), usage, "--t needs a number > 0, got '0'");
  EXPECT_EXIT(kParser.number("t", "nan", 0, inf, true), usage, "needs a number");
  EXPECT_EXIT(kParser.number("t", "inf", 0, inf, true), usage, "needs a number");
}

}  // namespace
}  // namespace vlm::cli
