#include "tools/common/cli_flags.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string_view>

#include "kernels/core/check.h"

namespace vlm::cli {

namespace {
std::string format_number(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
}  // namespace

FlagParser::FlagParser(std::string synopsis, FlagTable table) : synopsis_(std::move(synopsis)), table_(std::move(table)) {}

bool help_requested(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == "-h" || std::string_view(argv[i]) == "--help") return true;
  return false;
}

void FlagParser::print_usage(std::FILE* out) const {
  std::size_t width = 0;
  for (const auto& [name, help] : table_) width = std::max(width, name.size());
  std::fprintf(out, "usage: %s\n", synopsis_.c_str());
  for (const auto& [name, help] : table_)
    std::fprintf(out, "  --%-*s  %s\n", static_cast<int>(width), name.c_str(), help.c_str());
}

void FlagParser::fail(const std::string& error) const {
  std::fprintf(stderr, "error: %s\n", error.c_str());
  print_usage(stderr);
  std::exit(2);
}

void FlagParser::help() const {
  print_usage(stdout);
  std::exit(0);
}

std::vector<Flag> FlagParser::parse_list(int argc, char** argv, const std::set<std::string>& switches) const {
  std::vector<Flag> flags;
  for (int i = 1; i < argc; ++i) {
    std::string name = argv[i];
    if (name == "-h" || name == "--help") help();
    // vLLM's short form of --tensor-parallel-size.
    if (name == "-tp" || name.rfind("-tp=", 0) == 0) name = "--tensor-parallel-size" + name.substr(3);
    if (name.rfind("--", 0) != 0) fail("unexpected argument '" + name + "'");
    name = name.substr(2);
    std::string value;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      if (switches.count(name)) fail("--" + name + " takes no value");
    } else if (!switches.count(name)) {
      if (i + 1 >= argc) fail("--" + name + " needs a value");
      value = argv[++i];
    }
    if (!known(name)) fail("unknown flag --" + name);
    flags.push_back({std::move(name), std::move(value)});
  }
  return flags;
}

std::map<std::string, std::string> FlagParser::parse(int argc, char** argv, bool last_wins) const {
  std::map<std::string, std::string> flags;
  for (Flag& f : parse_list(argc, argv)) {
    if (!last_wins && flags.count(f.name)) fail("--" + f.name + " given twice");
    flags[f.name] = std::move(f.value);
  }
  return flags;
}

int64_t FlagParser::integer(const std::string& flag, const std::string& text, int64_t min) const {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < min)
    fail("--" + flag + " needs an integer >= " + std::to_string(min) + ", got '" + text + "'");
  return v;
}

double FlagParser::number(const std::string& flag, const std::string& text, double lo, double hi, bool lo_open) const {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const bool in_range = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi;
  if (text.empty() || *end != '\0' || !in_range) {
    const std::string range = hi == std::numeric_limits<double>::infinity()
                                  ? (lo_open ? "> " : ">= ") + format_number(lo)
                                  : "in " + std::string(lo_open ? "(" : "[") + format_number(lo) + ", " + format_number(hi) + "]";
    fail("--" + flag + " needs a number " + range + ", got '" + text + "'");
  }
  return v;
}

int run_tool(const std::function<int()>& body) {
  try {
    return body();
  } catch (const LoadError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const RequestError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 3;
  }
}

}  // namespace vlm::cli
