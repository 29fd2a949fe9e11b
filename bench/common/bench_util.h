// Small helpers the benchmarks share (header-only: every bench/*.cpp is its own executable).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include "kernels/core/thread_pool.h"

namespace vlm::bench {

// Wall-clock seconds (steady clock).
inline double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU seconds of the whole process (all pool threads; the pool blocks, it does not spin): the
// work done, which the wall time hides when other jobs share the cores.
inline double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// Wall and CPU seconds of one timed piece of work.
struct Timing {
  double wall = 0, cpu = 0;
};

inline double median(std::vector<double> x) {
  if (x.empty()) return 0;
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

// "1,2,3" -> {1, 2, 3} (empty items skipped).
inline std::vector<int> parse_ints(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(std::atoi(item.c_str()));
  return out;
}

// main() of a Google Benchmark executable: compute threads from $VLM_BENCH_THREADS (default
// default_threads), the custom context lines (name, value), then before_run (inputs built and
// benchmarks registered outside the timed runs), then the run. Returns the process status.
inline int run_google_benchmarks(int argc, char** argv, int default_threads = 2,
                                 const std::vector<std::pair<std::string, std::string>>& context = {},
                                 const std::function<void()>& before_run = {}) {
  const char* threads = std::getenv("VLM_BENCH_THREADS");
  set_num_threads(threads ? std::max(1, std::atoi(threads)) : default_threads);
  benchmark::Initialize(&argc, argv);
  for (const auto& [name, value] : context) benchmark::AddCustomContext(name, value);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (before_run) before_run();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace vlm::bench
