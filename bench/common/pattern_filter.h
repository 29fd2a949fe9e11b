// VLM_BENCH_PATTERNS=a,b: the sparse-prefill benchmarks (CPU and CUDA) run only the patterns whose
// names start with one of these prefixes; unset: all of them. Header-only, no Google Benchmark.
#pragma once

#include <cstdlib>
#include <string>

namespace vlm::bench {

inline bool pattern_wanted(const std::string& name) {
  const char* env = std::getenv("VLM_BENCH_PATTERNS");
  if (!env) return true;
  const std::string list = std::string(",") + env + ",";
  for (size_t i = 0; i < list.size();) {
    const size_t j = list.find(',', i + 1);
    if (j == std::string::npos) break;
    const std::string pre = list.substr(i + 1, j - i - 1);
    if (!pre.empty() && name.rfind(pre, 0) == 0) return true;
    i = j;
  }
  return false;
}

}  // namespace vlm::bench
