#include "tools/common/cli_flags.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace vlm::cli {

namespace {
std::string format_number(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
}  // namespace

const char kDtypeHelp[] =
    "activation dtype of the matrix products: auto (default: the checkpoint's dtype, so a bf16 checkpoint runs "
    "bf16 activations where the CPU has AVX512-BF16), bfloat16, float16, or float32 (the exact path)";
const char kGemmActivationsHelp[] = "older alias of --dtype: f32 = float32, bf16 = bfloat16";

std::optional<ComputeDType> compute_dtype_from_flags(const std::string& dtype_text, const std::string& gemm_text,
                                                     std::string* error) {
  if (!dtype_text.empty() && !gemm_text.empty()) {
    *error = "give --dtype or its alias --gemm-activations, not both";
    return std::nullopt;
  }
  if (!gemm_text.empty()) {
    if (gemm_text == "f32") return ComputeDType::Float32;
    if (gemm_text == "bf16") return ComputeDType::BFloat16;
    *error = "--gemm-activations must be f32 or bf16 (an alias of --dtype float32|bfloat16), got '" + gemm_text + "'";
    return std::nullopt;
  }
  ComputeDType d = ComputeDType::Auto;
  if (!dtype_text.empty() && !parse_compute_dtype(dtype_text, &d)) {
    *error = "--dtype must be auto, bfloat16, float16 or float32, got '" + dtype_text + "'";
    return std::nullopt;
  }
  return d;
}

FlagParser::FlagParser(std::string synopsis, FlagTable table) : synopsis_(std::move(synopsis)), table_(std::move(table)) {}

void FlagParser::fail(const std::string& error) const {
  std::size_t width = 0;
  for (const auto& [name, help] : table_) width = std::max(width, name.size());
  std::fprintf(stderr, "error: %s\nusage: %s\n", error.c_str(), synopsis_.c_str());
  for (const auto& [name, help] : table_)
    std::fprintf(stderr, "  --%-*s  %s\n", static_cast<int>(width), name.c_str(), help.c_str());
  std::exit(2);
}

std::map<std::string, std::string> FlagParser::parse(int argc, char** argv, bool last_wins) const {
  std::map<std::string, std::string> flags;
  for (int i = 1; i < argc; ++i) {
    std::string name = argv[i];
    if (name == "-h" || name == "--help") fail("help requested");
    if (name.rfind("--", 0) != 0) fail("unexpected argument '" + name + "'");
    name = name.substr(2);
    std::string value;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else {
      if (i + 1 >= argc) fail("--" + name + " needs a value");
      value = argv[++i];
    }
    if (!known(name)) fail("unknown flag --" + name);
    if (!last_wins && flags.count(name)) fail("--" + name + " given twice");
    flags[name] = value;
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

}  // namespace vlm::cli
