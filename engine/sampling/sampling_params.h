// SamplingParams: how one request picks its tokens and when it stops, with vLLM's semantics
// (vllm.SamplingParams). The server fills it from the request JSON; validate() rejects values
// vLLM rejects, with a RequestError (400) naming the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/structured/grammar_matcher.h"
#include "kernels/sparse_prefill/sparse_prefill_config.h"

namespace vlm {

struct SamplingParams {
  int n = 1;                  // parallel samples of the same prompt (choices 0..n-1)
  float temperature = 1.0f;   // < 1e-5: greedy (argmax after penalties)
  int top_k = 0;              // keep the k most likely tokens; 0 or -1: all
  float top_p = 1.0f;         // keep the smallest set whose probability reaches top_p; (0, 1]
  float min_p = 0.0f;         // drop tokens with p < min_p * p_max; [0, 1]
  float repetition_penalty = 1.0f;  // > 0; on prompt and output tokens: logit / p if > 0, else * p
  float presence_penalty = 0.0f;    // [-2, 2]; minus this once for every token already output
  float frequency_penalty = 0.0f;   // [-2, 2]; minus this times the token's count in the output
  std::optional<uint64_t> seed;     // per-request RNG seed; choice i of n uses seed + i
  std::optional<int> max_tokens;    // output tokens; unset: up to max_model_len
  int min_tokens = 0;               // stop tokens (EOS, stop_token_ids) are masked before this
  bool ignore_eos = false;          // keep going past the model's EOS tokens
  std::vector<int32_t> stop_token_ids;  // finish with reason "stop" after any of these
  std::vector<std::string> stop;        // stop strings, found across token boundaries
  bool include_stop_str_in_output = false;
  std::optional<int> logprobs;      // return the sampled token's logprob and this many top
                                    // alternatives (0: just the sampled one; -1: the whole vocab)
  bool skip_special_tokens = true;  // passed to the text decoder
  std::vector<std::pair<int32_t, float>> logit_bias;  // OpenAI logit_bias: added to the raw logits
                                                      // (after penalties), each in [-100, 100]
  // Structured output: only tokens the grammar can take are sampled, and EOS only where it
  // accepts (engine/structured/). Null: unconstrained.
  std::shared_ptr<structured::GrammarMatcher> constraint;
  std::optional<bool> sink_router;  // SinkRouter decode routing for this request; unset: the
                                    // engine's default (EngineConfig::sink_router)
  // Per-request override of the engine's sparse-prefill method (unset: the engine default;
  // Off: the exact dense path). Not a sampling knob, but it travels with the request like one.
  std::optional<SparsePrefillMethod> sparse_prefill;

  static constexpr float kGreedyEpsilon = 1e-5f;
  bool greedy() const { return temperature < kGreedyEpsilon; }

  // Throws RequestError(400, "invalid_request_error", ..., field) for an out-of-range value.
  // vocab_size bounds stop_token_ids and logprobs.
  void validate(int64_t vocab_size) const;
};

}  // namespace vlm
