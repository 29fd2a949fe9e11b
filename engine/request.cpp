#include "engine/request.h"

#include <fmt/format.h>

#include "kernels/core/check.h"

namespace vlm {

RequestEvent error_event(RequestFailure failure) {
  RequestEvent ev;
  ev.finish_reason = FinishReason::Error;
  ev.error = std::move(failure);
  ev.done = true;
  return ev;
}

int resolve_max_tokens(int64_t num_prompt_tokens, std::optional<int> max_tokens, int64_t max_model_len) {
  if (num_prompt_tokens >= max_model_len)
    throw RequestError(400, "invalid_request_error",
                       fmt::format("This model's maximum context length is {} tokens. However, your prompt "
                                   "has {} tokens, which leaves no room for a completion.",
                                   max_model_len, num_prompt_tokens),
                       "messages");
  if (!max_tokens) return static_cast<int>(max_model_len - num_prompt_tokens);
  if (num_prompt_tokens + *max_tokens > max_model_len)
    throw RequestError(400, "invalid_request_error",
                       fmt::format("This model's maximum context length is {} tokens. However, you requested "
                                   "{} tokens ({} in the messages, {} in the completion). Please reduce the "
                                   "length of the messages or completion.",
                                   max_model_len, num_prompt_tokens + *max_tokens, num_prompt_tokens, *max_tokens),
                       "max_tokens");
  return *max_tokens;
}

}  // namespace vlm
