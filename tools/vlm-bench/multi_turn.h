// The multi-turn workload (--dataset multi-turn): num_prompts conversations of num_turns turns.
// Turn 1 is a user message of input_len tokens with images_per_request generated PNG images
// (data: URLs); every later turn resends the whole history, the server's own answers included,
// plus a new user message of turn_len tokens. All conversations' turn t go out as one wave
// (under the run's concurrency limit) once every turn t-1 has answered, so a prefix cache sees
// each history after it was computed. The report adds TTFT by turn and, when the server exports
// vLLM's vllm:prefix_cache_{queries,hits}_total on /metrics, the hit rate of the run.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tools/vlm-bench/load_runner.h"
#include "tools/vlm-bench/prompt_builder.h"

namespace vlm::bench {

struct TurnStats {
  int turn = 0;  // 1-based
  int completed = 0, failed = 0;
  double mean_ttft_ms = 0, median_ttft_ms = 0;
  double mean_prompt_tokens = 0, mean_cached_tokens = 0;
};

struct MultiTurnResult {
  RunResult run;                   // every request, turn after turn (index = turn * conversations + c)
  std::vector<int> turn_of;        // [requests] 1-based turn of each sample
  std::vector<TurnStats> turns;    // [num_turns]
  TurnStats later;                 // turns 2+ together (turn = 0)
  std::optional<double> queries, hits;  // deltas of the server's prefix-cache counters
};

class MultiTurnWorkload {
 public:
  MultiTurnWorkload(const BenchOptions& options, std::string model, PromptBuilder& prompts);

  // Runs every turn; stops early when the deadline passes. metrics_text: GET /metrics (empty
  // string when unavailable), read before the first and after the last turn.
  MultiTurnResult run(LoadRunner& runner, double deadline_s, const std::function<std::string()>& metrics_text,
                      const std::function<void(const RunProgress&)>& on_progress);

  // The markdown-ish table printed after the standard one.
  static std::string format(const MultiTurnResult& r);

 private:
  std::vector<PreparedRequest> next_turn(int turn, const std::vector<RequestSample>* previous);

  const BenchOptions& o_;
  std::string model_;
  PromptBuilder& prompts_;
  std::vector<std::string> histories_;  // [conversations] messages array (JSON) so far
};

// The value of an unlabelled or labelled Prometheus sample `name` in `text` (summed over label
// sets), or nullopt when absent.
std::optional<double> prometheus_value(const std::string& text, const std::string& name);

}  // namespace vlm::bench
