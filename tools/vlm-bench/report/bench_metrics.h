// The metric math of vlm-bench, as `vllm bench serve` defines it (shared/SERVING.md d.1):
//   TTFT  request start -> first chunk whose `choices` is non-empty;
//   ITL   gaps between consecutive such chunks after the first;
//   E2EL  request start -> the last such chunk (usage chunk and [DONE] do not count);
//   TPOT  (E2EL - TTFT) / (output_tokens - 1), only for requests with more than one token;
//   goodput: completed requests meeting every SLO given, per second (DistServe);
//   peak output tokens/s: output tokens bucketed by whole seconds of arrival.
// Pure functions over recorded timelines, so tests feed them hand-made samples.
// Times are seconds from the start of the measured run unless a name says _ms.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace vlm::bench {

// One request's record, filled by the load runner.
struct RequestSample {
  int index = 0;
  bool success = false;
  int http_status = 0;        // 0: no HTTP response (connection error, timeout)
  std::string error;          // empty on success
  std::string failure_kind;   // "429", "500", "timeout", "connect", "stream_error", ... ("" on success)
  double start_s = 0.0;       // when the request was sent
  double scheduled_s = 0.0;   // when the arrival schedule wanted it sent (client queue before start)
  double end_s = 0.0;         // when the transfer ended (after [DONE])
  double ttft_s = 0.0;        // to the first chunk with non-empty choices (0 when none)
  double ttft_content_s = 0.0;  // to the first chunk with non-empty content text (0 when none)
  double e2el_s = 0.0;        // to the last chunk with non-empty choices
  std::vector<double> itl_s;  // gaps between choice chunks
  std::vector<double> content_chunk_s;  // arrival of every chunk with non-empty text (from run start)
  int prompt_tokens = 0;      // from usage (0 if absent)
  int output_tokens = 0;      // usage.completion_tokens, else the count of content chunks
  int content_chunks = 0;     // chunks that carried text
  bool usage_seen = false;
  int role_chunks = 0;        // chat: chunks whose delta has a role (expected: exactly one)
  bool done_seen = false;     // `data: [DONE]` arrived
  int chunks_after_done = 0;
  std::string text;           // the generated text (kept for the result JSON)
};

struct Distribution {
  double mean = 0, median = 0, std = 0, min = 0, max = 0;
  std::vector<std::pair<double, double>> percentiles;  // (p, value)
  size_t count = 0;
};

// Mean, median, population std (numpy's default) and percentiles with linear interpolation
// between closest ranks (numpy.percentile's default). Empty input: all zeros, count 0.
Distribution describe(std::vector<double> values, const std::vector<double>& percentiles);

struct GoodputSlo {
  std::optional<double> ttft_ms, tpot_ms, e2el_ms;
  bool any() const { return ttft_ms || tpot_ms || e2el_ms; }
};

struct BenchSummary {
  int num_requests = 0, completed = 0, failed = 0;
  std::map<std::string, int> failures_by_kind;  // HTTP status ("429") or error kind ("timeout")
  std::vector<std::string> first_errors;        // up to 10
  double duration_s = 0;                        // measured run: first send -> last end
  long long total_input_tokens = 0, total_output_tokens = 0;
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  std::optional<double> request_goodput;        // set when an SLO was given
  int good_requests = 0;
  double peak_output_tokens_per_s = 0;
  int peak_concurrency = 0;
  // Cross-checks of the stream against usage (SERVING.md d.4).
  int usage_missing = 0;        // completed requests without a usage chunk
  int chunk_count_mismatch = 0; // completed requests whose content chunks != completion_tokens
  int role_chunk_anomalies = 0; // chat requests with a role chunk count other than one
  int done_missing = 0;         // streams that ended without [DONE]
  int chunks_after_done = 0;
  // Distributions in milliseconds.
  Distribution ttft_ms, ttft_content_ms, tpot_ms, itl_ms, e2el_ms;
  double client_queue_mean_ms = 0;  // start - scheduled, averaged
};

// TPOT of one request in seconds, or nullopt when it produced at most one token.
std::optional<double> request_tpot_s(const RequestSample& s);

// Output tokens per one-second bucket [k, k+1) of arrival, over successful requests: each content
// chunk carries output_tokens / content_chunks tokens, so the buckets sum to the output tokens.
std::vector<double> output_tokens_per_second(const std::vector<RequestSample>& samples,
                                             double bucket_s = 1.0);

// The largest number of requests in flight at once ([start, end) intervals; an end at the same
// instant as a start is counted first).
int peak_concurrency(const std::vector<RequestSample>& samples);

// Aggregates over every sample. duration_s <= 0: computed from the samples (first start to last end).
// `chat`: role chunk checks apply.
BenchSummary summarize(const std::vector<RequestSample>& samples, const std::vector<double>& percentiles,
                       const GoodputSlo& slo, double duration_s = 0.0, bool chat = true);

}  // namespace vlm::bench
