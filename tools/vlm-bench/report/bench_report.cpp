#include "tools/vlm-bench/report/bench_report.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <stdexcept>

namespace vlm::bench {
namespace {

using nlohmann::json;

std::string pct_name(double p) {
  std::string s = fmt::format("{:g}", p);
  return s;
}

void add_distribution(json& j, const std::string& name, const Distribution& d) {
  j[fmt::format("mean_{}_ms", name)] = d.mean;
  j[fmt::format("median_{}_ms", name)] = d.median;
  j[fmt::format("std_{}_ms", name)] = d.std;
  j[fmt::format("min_{}_ms", name)] = d.min;
  j[fmt::format("max_{}_ms", name)] = d.max;
  for (const auto& [p, v] : d.percentiles) j[fmt::format("p{}_{}_ms", pct_name(p), name)] = v;
}

void table_distribution(std::string& out, const std::string& title, const std::string& name, const Distribution& d) {
  out += fmt::format("{:-^60}\n", title);
  out += fmt::format("{:<45}{:>15.2f}\n", "Mean " + name + " (ms):", d.mean);
  out += fmt::format("{:<45}{:>15.2f}\n", "Median " + name + " (ms):", d.median);
  out += fmt::format("{:<45}{:>15.2f}\n", "Std " + name + " (ms):", d.std);
  for (const auto& [p, v] : d.percentiles) out += fmt::format("{:<45}{:>15.2f}\n", fmt::format("P{:g} {} (ms):", p, name), v);
}

}  // namespace

std::string format_table(const BenchSummary& s, const BenchOptions& o, const RunInfo& info) {
  std::string out;
  out += fmt::format("{:=^60}\n", " Serving Benchmark Result ");
  out += fmt::format("{:<45}{:>15}\n", "Model:", info.model);
  out += fmt::format("{:<45}{:>15}\n", "Endpoint:", o.api_path());
  out += fmt::format("{:<45}{:>15}\n", "Dataset:", o.dataset);
  out += fmt::format("{:<45}{:>15}\n", "Request rate (req/s):", o.request_rate > 0 ? fmt::format("{:g}", o.request_rate) : "inf");
  out += fmt::format("{:<45}{:>15}\n", "Max concurrency:", o.max_concurrency > 0 ? std::to_string(o.max_concurrency) : "none");
  out += fmt::format("{:<45}{:>15}\n", "Successful requests:", s.completed);
  out += fmt::format("{:<45}{:>15}\n", "Failed requests:", s.failed);
  for (const auto& [kind, n] : s.failures_by_kind) out += fmt::format("{:<45}{:>15}\n", "  failed with " + kind + ":", n);
  out += fmt::format("{:<45}{:>15.2f}\n", "Benchmark duration (s):", s.duration_s);
  out += fmt::format("{:<45}{:>15}\n", "Total input tokens:", s.total_input_tokens);
  out += fmt::format("{:<45}{:>15}\n", "Total generated tokens:", s.total_output_tokens);
  out += fmt::format("{:<45}{:>15.2f}\n", "Request throughput (req/s):", s.request_throughput);
  if (s.request_goodput) out += fmt::format("{:<45}{:>15.2f}\n", "Request goodput (req/s):", *s.request_goodput);
  out += fmt::format("{:<45}{:>15.2f}\n", "Output token throughput (tok/s):", s.output_throughput);
  out += fmt::format("{:<45}{:>15.2f}\n", "Peak output token throughput (tok/s):", s.peak_output_tokens_per_s);
  out += fmt::format("{:<45}{:>15}\n", "Peak concurrent requests:", s.peak_concurrency);
  out += fmt::format("{:<45}{:>15.2f}\n", "Total token throughput (tok/s):", s.total_token_throughput);
  out += fmt::format("{:<45}{:>15.2f}\n", "Mean client queue time (ms):", s.client_queue_mean_ms);
  table_distribution(out, "Time to First Token", "TTFT", s.ttft_ms);
  table_distribution(out, "Time to First Content", "TTFC", s.ttft_content_ms);
  table_distribution(out, "Time per Output Token (excl. 1st token)", "TPOT", s.tpot_ms);
  table_distribution(out, "Inter-token Latency", "ITL", s.itl_ms);
  table_distribution(out, "End-to-end Latency", "E2EL", s.e2el_ms);
  out += fmt::format("{:-^60}\n", "Stream checks");
  out += fmt::format("{:<45}{:>15}\n", "Requests without a usage chunk:", s.usage_missing);
  out += fmt::format("{:<45}{:>15}\n", "Content chunks != completion_tokens:", s.chunk_count_mismatch);
  if (o.endpoint == "chat" && o.stream) out += fmt::format("{:<45}{:>15}\n", "Role chunk count != 1:", s.role_chunk_anomalies);
  if (o.stream) {
    out += fmt::format("{:<45}{:>15}\n", "Streams without [DONE]:", s.done_missing);
    out += fmt::format("{:<45}{:>15}\n", "Chunks after [DONE]:", s.chunks_after_done);
  }
  out += fmt::format("{:<45}{:>15}\n", "Prompt lengths:", info.prompt_calibration);
  if (info.hit_deadline) out += "The run stopped at --timeout; unfinished requests count as failed.\n";
  out += std::string(60, '=') + "\n";
  if (!s.first_errors.empty()) {
    out += "First errors:\n";
    for (const std::string& e : s.first_errors) out += "  " + e + "\n";
  }
  return out;
}

void write_result_json(const std::string& path, const BenchSummary& s, const std::vector<RequestSample>& samples,
                       const BenchOptions& o, const RunInfo& info) {
  json j;
  j["backend"] = "vlm-bench";
  j["model_id"] = info.model;
  j["base_url"] = o.base_url;
  j["endpoint"] = o.api_path();
  j["dataset"] = o.dataset;
  j["num_prompts"] = o.num_prompts;
  j["request_rate"] = o.request_rate > 0 ? json(o.request_rate) : json("inf");
  j["burstiness"] = o.burstiness;
  j["max_concurrency"] = o.max_concurrency > 0 ? json(o.max_concurrency) : json(nullptr);
  j["stream"] = o.stream;
  j["seed"] = o.seed;
  j["prompt_calibration"] = info.prompt_calibration;
  j["hit_deadline"] = info.hit_deadline;
  j["duration"] = s.duration_s;
  j["completed"] = s.completed;
  j["failed"] = s.failed;
  j["failures_by_status"] = s.failures_by_kind;
  j["errors_first"] = s.first_errors;
  j["total_input_tokens"] = s.total_input_tokens;
  j["total_output_tokens"] = s.total_output_tokens;
  j["request_throughput"] = s.request_throughput;
  j["request_goodput"] = s.request_goodput ? json(*s.request_goodput) : json(nullptr);
  j["output_throughput"] = s.output_throughput;
  j["total_token_throughput"] = s.total_token_throughput;
  j["max_output_tokens_per_s"] = s.peak_output_tokens_per_s;
  j["max_concurrent_requests"] = s.peak_concurrency;
  j["mean_client_queue_time_ms"] = s.client_queue_mean_ms;
  j["stream_checks"] = {{"usage_missing", s.usage_missing}, {"chunk_count_mismatch", s.chunk_count_mismatch},
                        {"role_chunk_anomalies", s.role_chunk_anomalies}, {"done_missing", s.done_missing},
                        {"chunks_after_done", s.chunks_after_done}};
  add_distribution(j, "ttft", s.ttft_ms);
  add_distribution(j, "ttfc", s.ttft_content_ms);
  add_distribution(j, "tpot", s.tpot_ms);
  add_distribution(j, "itl", s.itl_ms);
  add_distribution(j, "e2el", s.e2el_ms);
  j["percentiles"] = o.percentiles;
  // vLLM's --save-detailed arrays (seconds), then one object per request.
  json input_lens = json::array(), output_lens = json::array(), ttfts = json::array(), itls = json::array(),
       errors = json::array(), requests = json::array();
  for (const RequestSample& r : samples) {
    input_lens.push_back(r.prompt_tokens);
    output_lens.push_back(r.output_tokens);
    ttfts.push_back(r.ttft_s);
    itls.push_back(r.itl_s);
    errors.push_back(r.error);
    const auto tpot = request_tpot_s(r);
    requests.push_back({{"index", r.index}, {"success", r.success}, {"http_status", r.http_status},
                        {"failure", r.failure_kind}, {"error", r.error},
                        {"scheduled_s", r.scheduled_s}, {"start_s", r.start_s}, {"end_s", r.end_s},
                        {"ttft_s", r.ttft_s}, {"ttfc_s", r.ttft_content_s}, {"e2el_s", r.e2el_s},
                        {"tpot_s", tpot ? json(*tpot) : json(nullptr)}, {"itl_s", r.itl_s},
                        {"prompt_tokens", r.prompt_tokens}, {"output_tokens", r.output_tokens},
                        {"content_chunks", r.content_chunks}, {"usage_seen", r.usage_seen},
                        {"role_chunks", r.role_chunks}, {"done_seen", r.done_seen},
                        {"chunks_after_done", r.chunks_after_done}, {"generated_text", r.text}});
  }
  j["input_lens"] = input_lens;
  j["output_lens"] = output_lens;
  j["ttfts"] = ttfts;
  j["itls"] = itls;
  j["errors"] = errors;
  j["requests"] = requests;
  std::ofstream f(path);
  if (!f) throw std::runtime_error("--result-json " + path + ": cannot open for writing");
  f << j.dump(1) << "\n";
  if (!f) throw std::runtime_error("--result-json " + path + ": write failed");
}

void ProgressLine::update(const RunProgress& p) {
  if (!enabled_) return;
  const int width = 30;
  const int finished = p.done + p.failed;
  const int filled = p.total > 0 ? finished * width / p.total : width;
  const double rate = p.elapsed_s > 0 ? static_cast<double>(p.output_chunks) / p.elapsed_s : 0.0;
  std::fprintf(stderr, "\r%s [%s%s] %d/%d done, %d failed, %d in flight, %.0f chunks/s, %.1fs ", label_.c_str(),
               std::string(filled, '#').c_str(), std::string(width - filled, ' ').c_str(), finished, p.total,
               p.failed, p.in_flight, rate, p.elapsed_s);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressLine::close() {
  if (enabled_ && drawn_) std::fputc('\n', stderr);
  drawn_ = false;
}

}  // namespace vlm::bench
