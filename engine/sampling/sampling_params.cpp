#include "engine/sampling/sampling_params.h"

#include <cmath>

#include <fmt/format.h>

#include "kernels/core/check.h"

namespace vlm {

namespace {
[[noreturn]] void bad(const std::string& field, const std::string& message) {
  throw RequestError(400, "invalid_request_error", field + " " + message, field);
}
}  // namespace

void SamplingParams::validate(int64_t vocab_size) const {
  if (n < 1 || n > 128) bad("n", fmt::format("must be in [1, 128], got {}", n));
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    bad("temperature", fmt::format("must be >= 0, got {}", temperature));
  if (top_k < -1) bad("top_k", fmt::format("must be -1 (disable), 0 (disable) or at least 1, got {}", top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) bad("top_p", fmt::format("must be in (0, 1], got {}", top_p));
  if (!(min_p >= 0.0f && min_p <= 1.0f)) bad("min_p", fmt::format("must be in [0, 1], got {}", min_p));
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
    bad("repetition_penalty", fmt::format("must be > 0, got {}", repetition_penalty));
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    bad("presence_penalty", fmt::format("must be in [-2, 2], got {}", presence_penalty));
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    bad("frequency_penalty", fmt::format("must be in [-2, 2], got {}", frequency_penalty));
  if (max_tokens && *max_tokens < 1) bad("max_tokens", fmt::format("must be at least 1, got {}", *max_tokens));
  if (min_tokens < 0) bad("min_tokens", fmt::format("must be >= 0, got {}", min_tokens));
  if (max_tokens && min_tokens > *max_tokens)
    bad("min_tokens", fmt::format("must be <= max_tokens ({}), got {}", *max_tokens, min_tokens));
  for (int32_t id : stop_token_ids)
    if (id < 0 || id >= vocab_size)
      bad("stop_token_ids", fmt::format("contains {}, outside the vocabulary of {}", id, vocab_size));
  for (const std::string& s : stop)
    if (s.empty()) bad("stop", "must not contain an empty string");
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size) bad("logit_bias", fmt::format("has token {}, outside the vocabulary of {}", id, vocab_size));
    if (!(bias >= -100.0f && bias <= 100.0f)) bad("logit_bias", fmt::format("values must be in [-100, 100], got {}", bias));
  }
  if (constraint && constraint->vocabulary().size() > vocab_size)
    bad("response_format", fmt::format("the tokenizer's vocabulary ({}) is larger than the model's ({})",
                                       constraint->vocabulary().size(), vocab_size));
  if (logprobs && (*logprobs < -1 || *logprobs > vocab_size))
    bad("logprobs", fmt::format("must be in [-1, {}], got {}", vocab_size, *logprobs));
}

}  // namespace vlm
