#include "tools/vlm-bench/report/bench_metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace vlm::bench {
namespace {

// numpy.percentile, method "linear": rank p/100 * (n-1), interpolated between neighbours.
double percentile_sorted(const std::vector<double>& sorted, double p) {
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

}  // namespace

Distribution describe(std::vector<double> values, const std::vector<double>& percentiles) {
  Distribution d;
  d.count = values.size();
  for (double p : percentiles) d.percentiles.emplace_back(p, 0.0);
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  const double n = static_cast<double>(values.size());
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / n;
  double sq = 0;
  for (double v : values) sq += (v - d.mean) * (v - d.mean);
  d.std = std::sqrt(sq / n);
  d.median = percentile_sorted(values, 50.0);
  d.min = values.front();
  d.max = values.back();
  for (auto& [p, v] : d.percentiles) v = percentile_sorted(values, p);
  return d;
}

std::optional<double> request_tpot_s(const RequestSample& s) {
  if (s.output_tokens <= 1) return std::nullopt;
  return (s.e2el_s - s.ttft_s) / static_cast<double>(s.output_tokens - 1);
}

std::vector<double> output_tokens_per_second(const std::vector<RequestSample>& samples, double bucket_s) {
  std::vector<double> buckets;
  for (const RequestSample& s : samples) {
    if (!s.success || s.content_chunk_s.empty()) continue;
    const double per_chunk = static_cast<double>(s.output_tokens) / static_cast<double>(s.content_chunk_s.size());
    for (double t : s.content_chunk_s) {
      const size_t k = static_cast<size_t>(std::max(0.0, std::floor(t / bucket_s)));
      if (buckets.size() <= k) buckets.resize(k + 1, 0.0);
      buckets[k] += per_chunk;
    }
  }
  for (double& b : buckets) b /= bucket_s;
  return buckets;
}

int peak_concurrency(const std::vector<RequestSample>& samples) {
  std::vector<std::pair<double, int>> events;  // (time, +1 start / -1 end); ends sort first at ties
  for (const RequestSample& s : samples) {
    events.emplace_back(s.start_s, +1);
    events.emplace_back(std::max(s.end_s, s.start_s), -1);
  }
  std::sort(events.begin(), events.end());
  int now = 0, peak = 0;
  for (const auto& [t, delta] : events) {
    now += delta;
    peak = std::max(peak, now);
  }
  return peak;
}

BenchSummary summarize(const std::vector<RequestSample>& samples, const std::vector<double>& percentiles,
                       const GoodputSlo& slo, double duration_s, bool chat) {
  BenchSummary r;
  r.num_requests = static_cast<int>(samples.size());
  std::vector<double> ttft, ttft_content, tpot, itl, e2el;
  double first_start = samples.empty() ? 0.0 : samples.front().start_s, last_end = first_start;
  double queue_sum = 0;
  for (const RequestSample& s : samples) {
    first_start = std::min(first_start, s.start_s);
    last_end = std::max(last_end, s.end_s);
    queue_sum += std::max(0.0, s.start_s - s.scheduled_s);
    if (!s.success) {
      ++r.failed;
      ++r.failures_by_kind[s.failure_kind.empty() ? "unknown" : s.failure_kind];
      if (r.first_errors.size() < 10)
        r.first_errors.push_back("request " + std::to_string(s.index) + ": " + s.error);
      continue;
    }
    ++r.completed;
    r.total_input_tokens += s.prompt_tokens;
    r.total_output_tokens += s.output_tokens;
    ttft.push_back(s.ttft_s * 1e3);
    if (s.ttft_content_s > 0) ttft_content.push_back(s.ttft_content_s * 1e3);
    e2el.push_back(s.e2el_s * 1e3);
    for (double g : s.itl_s) itl.push_back(g * 1e3);
    const std::optional<double> t = request_tpot_s(s);
    if (t) tpot.push_back(*t * 1e3);
    if (slo.any()) {
      const double tpot_ms = t ? *t * 1e3 : 0.0;  // single-token requests meet any TPOT SLO (vLLM)
      const bool good = (!slo.ttft_ms || s.ttft_s * 1e3 <= *slo.ttft_ms) &&
                        (!slo.tpot_ms || tpot_ms <= *slo.tpot_ms) &&
                        (!slo.e2el_ms || s.e2el_s * 1e3 <= *slo.e2el_ms);
      r.good_requests += good;
    }
    if (!s.usage_seen) ++r.usage_missing;
    else if (s.content_chunks != s.output_tokens) ++r.chunk_count_mismatch;
    if (chat && s.role_chunks != 1 && !s.content_chunk_s.empty()) ++r.role_chunk_anomalies;
  }
  for (const RequestSample& s : samples) {
    if (s.http_status == 200 && !s.done_seen && !s.content_chunk_s.empty()) ++r.done_missing;
    r.chunks_after_done += s.chunks_after_done;
  }
  r.duration_s = duration_s > 0 ? duration_s : (last_end - first_start);
  if (r.duration_s > 0) {
    r.request_throughput = r.completed / r.duration_s;
    r.output_throughput = static_cast<double>(r.total_output_tokens) / r.duration_s;
    r.total_token_throughput = static_cast<double>(r.total_input_tokens + r.total_output_tokens) / r.duration_s;
    if (slo.any()) r.request_goodput = r.good_requests / r.duration_s;
  } else if (slo.any()) {
    r.request_goodput = 0.0;
  }
  const std::vector<double> per_second = output_tokens_per_second(samples);
  for (double b : per_second) r.peak_output_tokens_per_s = std::max(r.peak_output_tokens_per_s, b);
  r.peak_concurrency = peak_concurrency(samples);
  r.client_queue_mean_ms = samples.empty() ? 0.0 : queue_sum / static_cast<double>(samples.size()) * 1e3;
  r.ttft_ms = describe(ttft, percentiles);
  r.ttft_content_ms = describe(ttft_content, percentiles);
  r.tpot_ms = describe(tpot, percentiles);
  r.itl_ms = describe(itl, percentiles);
  r.e2el_ms = describe(e2el, percentiles);
  return r;
}

}  // namespace vlm::bench
