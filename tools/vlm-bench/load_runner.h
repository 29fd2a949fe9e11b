// LoadRunner: sends prepared requests on an arrival schedule and records every response.
// One thread drives all transfers through the libcurl multi interface (hundreds of concurrent
// streams, one connection each, reused when free). Chunk times come from steady_clock in the
// write callback, i.e. when libcurl hands over the bytes after poll() woke up.
// Bounds: a request past request_timeout_s fails as "timeout"; at deadline_s every transfer still
// open is aborted ("run_timeout") and requests not yet sent fail as "not_sent", so a run always
// ends and completed + failed = requests.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "tools/vlm-bench/report/bench_metrics.h"
#include "tools/vlm-bench/bench_options.h"
#include "tools/vlm-bench/workload.h"

namespace vlm::bench {

struct RunProgress {
  int done = 0, failed = 0, in_flight = 0, total = 0;
  long long output_chunks = 0;
  double elapsed_s = 0;
};

struct RunResult {
  std::vector<RequestSample> samples;  // in request order
  double duration_s = 0;               // first send -> last transfer end (or deadline)
  bool hit_deadline = false;
};

class LoadRunner {
 public:
  explicit LoadRunner(const BenchOptions& options);

  // schedule[i]: when request i is due, seconds from the start of this call. max_concurrency 0:
  // unlimited. deadline_s: seconds from the start of this call. on_progress: called about ten
  // times a second (may be empty).
  RunResult run(const std::vector<PreparedRequest>& requests, const std::vector<double>& schedule,
                int max_concurrency, double deadline_s, const std::function<void(const RunProgress&)>& on_progress);

 private:
  const BenchOptions& options_;
};

}  // namespace vlm::bench
