// What a run prints and writes: the table on stdout (laid out like `vllm bench serve`'s),
// the result JSON (the aggregates under vLLM's --save-result names, vLLM's detailed per-request
// arrays, and one object per request), and the progress line on stderr.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "tools/vlm-bench/report/bench_metrics.h"
#include "tools/vlm-bench/bench_options.h"
#include "tools/vlm-bench/load_runner.h"

namespace vlm::bench {

struct RunInfo {
  std::string model;
  std::string prompt_calibration;  // how prompt lengths were matched to the server
  bool hit_deadline = false;
};

std::string format_table(const BenchSummary& s, const BenchOptions& o, const RunInfo& info);

// Throws std::runtime_error naming the file when it cannot be written.
void write_result_json(const std::string& path, const BenchSummary& s, const std::vector<RequestSample>& samples,
                       const BenchOptions& o, const RunInfo& info);

// One carriage-return-refreshed line on stderr: a bar, done/failed/in flight, output chunks/s.
class ProgressLine {
 public:
  ProgressLine(bool enabled, std::string label) : enabled_(enabled), label_(std::move(label)) {}
  void update(const RunProgress& p);
  void close();  // ends the line (once)

 private:
  bool enabled_;
  std::string label_;
  bool drawn_ = false;
};

}  // namespace vlm::bench
