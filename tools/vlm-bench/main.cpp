// vlm-bench: a load-testing client for any OpenAI-compatible server (vLLM, llama-server, SGLang,
// vlm-server). Sends a workload on an arrival schedule, times every streamed chunk, and reports
// the metrics of `vllm bench serve` (shared/SERVING.md d.1). `vlm-bench --help` lists the flags.
// Exit status: 0 when the run finished (failed requests are reported, not fatal), 1 when the
// server could not be used at all, 2 for a bad command line.
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tools/vlm-bench/arrival_schedule.h"
#include "tools/vlm-bench/report/bench_metrics.h"
#include "tools/vlm-bench/bench_options.h"
#include "tools/vlm-bench/report/bench_report.h"
#include "tools/vlm-bench/load_runner.h"
#include "tools/vlm-bench/multi_turn.h"
#include "tools/vlm-bench/prompt_builder.h"
#include "tools/vlm-bench/simple_http_client.h"
#include "tools/vlm-bench/report/svg_plot.h"
#include "tools/vlm-bench/workload.h"
#include "model/tokenizer/tokenizer.h"

namespace vlm::bench {
namespace {

// Many streams need many sockets: lift the soft open-file limit to the hard one.
void raise_file_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

// The first model id of GET /v1/models. Throws std::runtime_error saying what went wrong.
std::string first_model(SimpleHttpClient& http, const BenchOptions& o) {
  const std::string url = o.url("/v1/models");
  const HttpResult r = http.get(url);
  if (r.status == 0) throw std::runtime_error("GET " + url + ": " + r.error + " (is the server running?)");
  if (r.status != 200) throw std::runtime_error("GET " + url + ": HTTP " + std::to_string(r.status) + "; pass --model");
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].contains("id") || !j["data"][0]["id"].is_string())
    throw std::runtime_error("GET " + url + ": no model id in the reply; pass --model");
  return j["data"][0]["id"].get<std::string>();
}

int run_bench(const BenchOptions& o) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  auto remaining_s = [&] { return o.timeout_s - std::chrono::duration<double>(Clock::now() - t0).count(); };
  raise_file_limit();

  SimpleHttpClient http(o.api_key, std::min(o.request_timeout_s, 60.0));
  RunInfo info;
  info.model = o.model.empty() ? first_model(http, o) : o.model;

  // Prompts: calibrated against the server's /tokenize when it has one (jsonl needs none).
  const bool random = o.dataset != "jsonl";
  std::unique_ptr<Tokenizer> local;
  if (!o.tokenizer_dir.empty()) local = Tokenizer::load(o.tokenizer_dir);  // LoadError names the file
  PromptBuilder prompts(random ? &http : nullptr, o.url("/tokenize"), info.model, local.get());
  if (!random) info.prompt_calibration = "from the file";
  else if (o.prompt_ids) info.prompt_calibration = "exact (token ids)";
  else if (prompts.calibrated()) info.prompt_calibration = "matched via " + prompts.counter();
  else {
    info.prompt_calibration = "estimated (no /tokenize)";
    std::fprintf(stderr, "note: %s did not answer; prompt lengths assume one token per word\n",
                 o.url("/tokenize").c_str());
  }
  const bool multi_turn = o.dataset == "multi-turn";
  const std::vector<PreparedRequest> warmup = build_workload(o, info.model, prompts, o.warmup, 7777);
  const std::vector<PreparedRequest> requests =
      multi_turn ? std::vector<PreparedRequest>{} : build_workload(o, info.model, prompts, o.num_prompts, 0);

  const bool show_progress = !o.no_progress && (o.progress || isatty(STDERR_FILENO));
  LoadRunner runner(o);
  if (!warmup.empty()) {
    ProgressLine bar(show_progress, "warmup");
    const RunResult w = runner.run(warmup, std::vector<double>(warmup.size(), 0.0), o.max_concurrency,
                                   remaining_s(), [&](const RunProgress& p) { bar.update(p); });
    bar.close();
    int failed = 0;
    for (const RequestSample& s : w.samples) failed += !s.success;
    if (failed) std::fprintf(stderr, "warning: %d of %zu warmup requests failed\n", failed, w.samples.size());
  }
  ProgressLine bar(show_progress, "bench");
  std::optional<MultiTurnResult> turns;
  RunResult run;
  if (multi_turn) {
    MultiTurnWorkload workload(o, info.model, prompts);
    auto metrics = [&] {
      const HttpResult m = http.get(o.url("/metrics"));
      return m.status == 200 ? m.body : std::string();
    };
    turns = workload.run(runner, std::max(0.0, remaining_s()), metrics, [&](const RunProgress& p) { bar.update(p); });
    run = turns->run;
  } else {
    const std::vector<double> schedule = arrival_schedule(o.num_prompts, o.request_rate, o.burstiness, o.seed);
    run = runner.run(requests, schedule, o.max_concurrency, std::max(0.0, remaining_s()),
                     [&](const RunProgress& p) { bar.update(p); });
  }
  bar.close();
  info.hit_deadline = run.hit_deadline;

  const GoodputSlo slo{o.goodput_ttft_ms, o.goodput_tpot_ms, o.goodput_e2el_ms};
  const BenchSummary summary = summarize(run.samples, o.percentiles, slo, run.duration_s, o.endpoint == "chat" && o.stream);
  std::fputs(format_table(summary, o, info).c_str(), stdout);
  if (turns) std::fputs(MultiTurnWorkload::format(*turns).c_str(), stdout);
  std::fflush(stdout);
  if (!o.result_json.empty()) write_result_json(o.result_json, summary, run.samples, o, info);
  if (!o.plot_svg.empty()) {
    const std::string rate = o.request_rate > 0 ? fmt::format("{:g} req/s", o.request_rate) : "rate inf";
    write_svg_report(o.plot_svg, run.samples,
                     fmt::format("vlm-bench: {} {} {}, {} requests, {}", info.model, o.api_path(), o.dataset,
                                 o.num_prompts, rate));
  }
  return 0;
}

}  // namespace
}  // namespace vlm::bench

int main(int argc, char** argv) {
  using namespace vlm::bench;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::fputs(bench_usage().c_str(), stdout);
      return 0;
    }
  BenchOptions options;
  try {
    options = parse_bench_options(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "error: %s\n%s", e.what(), bench_usage().c_str());
    return 2;
  }
  curl_global_init(CURL_GLOBAL_DEFAULT);
  int rc = 1;
  try {
    rc = run_bench(options);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    rc = 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    rc = 1;
  }
  curl_global_cleanup();
  return rc;
}
