#include "tools/vlm-bench/multi_turn.h"

#include <algorithm>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "tools/vlm-bench/workload.h"

namespace vlm::bench {
namespace {

using nlohmann::json;

TurnStats stats_of(const std::vector<const RequestSample*>& samples, int turn, const std::vector<double>& pct) {
  TurnStats t;
  t.turn = turn;
  std::vector<double> ttft;
  double prompt = 0, cached = 0;
  for (const RequestSample* s : samples) {
    if (!s->success) {
      ++t.failed;
      continue;
    }
    ++t.completed;
    ttft.push_back(s->ttft_s * 1000.0);
    prompt += s->prompt_tokens;
    cached += s->cached_tokens;
  }
  const Distribution d = describe(ttft, pct);
  t.mean_ttft_ms = d.mean;
  t.median_ttft_ms = d.median;
  if (t.completed) {
    t.mean_prompt_tokens = prompt / t.completed;
    t.mean_cached_tokens = cached / t.completed;
  }
  return t;
}

}  // namespace

std::optional<double> prometheus_value(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  std::optional<double> total;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) != 0) continue;
    const char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != ' ' && next != '{') continue;
    const auto sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    try {
      total = total.value_or(0.0) + std::stod(line.substr(sp + 1));
    } catch (const std::exception&) {
    }
  }
  return total;
}

MultiTurnWorkload::MultiTurnWorkload(const BenchOptions& options, std::string model, PromptBuilder& prompts)
    : o_(options), model_(std::move(model)), prompts_(prompts) {}

std::vector<PreparedRequest> MultiTurnWorkload::next_turn(int turn, const std::vector<RequestSample>* previous) {
  std::mt19937_64 rng(o_.seed * 1000003ull + 31ull * static_cast<uint64_t>(turn) + 4242);
  const int C = o_.num_prompts;
  if (turn == 1) histories_.assign(static_cast<size_t>(C), "[]");
  std::vector<PreparedRequest> out;
  for (int c = 0; c < C; ++c) {
    json messages = json::parse(histories_[static_cast<size_t>(c)]);
    if (previous) {  // the server's own answer to the previous turn
      const RequestSample& s = (*previous)[static_cast<size_t>(c)];
      messages.push_back({{"role", "assistant"}, {"content", s.text}});
    }
    PreparedRequest r;
    r.input_len = turn == 1 ? o_.input_len : o_.turn_len;
    r.output_len = o_.output_len;
    const std::string text = prompts_.text(r.input_len, rng);
    if (turn == 1 && o_.images_per_request > 0) {
      json content = json::array();
      for (int k = 0; k < o_.images_per_request; ++k)
        content.push_back(image_part(o_, static_cast<int64_t>(c) * o_.images_per_request + k, rng()));
      content.push_back({{"type", "text"}, {"text", text}});
      r.num_images = o_.images_per_request;
      messages.push_back({{"role", "user"}, {"content", content}});
    } else {
      messages.push_back({{"role", "user"}, {"content", text}});
    }
    histories_[static_cast<size_t>(c)] = messages.dump();
    json body = {{"messages", std::move(messages)}};
    finish_request_body(body, o_, model_, r.output_len);
    r.body = body.dump();
    r.index = (turn - 1) * C + c;
    out.push_back(std::move(r));
  }
  return out;
}

MultiTurnResult MultiTurnWorkload::run(LoadRunner& runner, double deadline_s,
                                       const std::function<std::string()>& metrics_text,
                                       const std::function<void(const RunProgress&)>& on_progress) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  MultiTurnResult result;
  const std::string before = metrics_text();
  std::vector<RequestSample> previous;
  for (int turn = 1; turn <= o_.num_turns; ++turn) {
    const double left = deadline_s - std::chrono::duration<double>(Clock::now() - t0).count();
    if (left <= 0) break;
    const std::vector<PreparedRequest> wave = next_turn(turn, turn == 1 ? nullptr : &previous);
    const double offset = std::chrono::duration<double>(Clock::now() - t0).count();
    RunResult r = runner.run(wave, std::vector<double>(wave.size(), 0.0), o_.max_concurrency, left, on_progress);
    for (RequestSample& s : r.samples) {  // one timeline for the whole run
      s.index += (turn - 1) * o_.num_prompts;
      s.start_s += offset, s.scheduled_s += offset, s.end_s += offset;
      for (double& t : s.content_chunk_s) t += offset;
      result.turn_of.push_back(turn);
      result.run.samples.push_back(s);
    }
    result.run.hit_deadline = result.run.hit_deadline || r.hit_deadline;
    std::vector<const RequestSample*> mine;
    for (const RequestSample& s : r.samples) mine.push_back(&s);
    result.turns.push_back(stats_of(mine, turn, o_.percentiles));
    previous = std::move(r.samples);
  }
  result.run.duration_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<const RequestSample*> later;
  for (size_t i = 0; i < result.run.samples.size(); ++i)
    if (result.turn_of[i] > 1) later.push_back(&result.run.samples[i]);
  result.later = stats_of(later, 0, o_.percentiles);
  const std::string after = metrics_text();
  const auto q0 = prometheus_value(before, "vllm:prefix_cache_queries_total");
  const auto q1 = prometheus_value(after, "vllm:prefix_cache_queries_total");
  const auto h0 = prometheus_value(before, "vllm:prefix_cache_hits_total");
  const auto h1 = prometheus_value(after, "vllm:prefix_cache_hits_total");
  if (q1 && h1) {
    result.queries = *q1 - q0.value_or(0.0);
    result.hits = *h1 - h0.value_or(0.0);
  }
  return result;
}

std::string MultiTurnWorkload::format(const MultiTurnResult& r) {
  std::string s = "============ Multi-turn (TTFT by turn) ============\n";
  s += fmt::format("{:<10}{:>10}{:>8}{:>16}{:>16}{:>14}{:>14}\n", "turn", "completed", "failed", "mean TTFT (ms)",
                   "P50 TTFT (ms)", "prompt tok", "cached tok");
  auto row = [&](const std::string& name, const TurnStats& t) {
    s += fmt::format("{:<10}{:>10}{:>8}{:>16.2f}{:>16.2f}{:>14.1f}{:>14.1f}\n", name, t.completed, t.failed,
                     t.mean_ttft_ms, t.median_ttft_ms, t.mean_prompt_tokens, t.mean_cached_tokens);
  };
  for (const TurnStats& t : r.turns) row(std::to_string(t.turn), t);
  row("2+", r.later);
  if (r.queries && r.hits)
    s += fmt::format("prefix cache (server /metrics): {:.0f} of {:.0f} queried tokens hit ({:.1f}%)\n", *r.hits,
                     *r.queries, *r.queries > 0 ? 100.0 * *r.hits / *r.queries : 0.0);
  else
    s += "prefix cache: the server exports no vllm:prefix_cache_* counters\n";
  return s;
}

}  // namespace vlm::bench
