#include "engine/scheduling/sequence.h"

#include "kernels/core/check.h"

namespace vlm {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::None: return "none";
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Abort: return "abort";
    case FinishReason::Error: return "error";
  }
  return "?";
}

Sequence::Sequence(int64_t id_, std::vector<int32_t> prompt, SamplingParams params_,
                   std::vector<ModalityTag> prompt_modalities_)
    : id(id_), group_id(id_), token_ids(std::move(prompt)), prompt_modalities(std::move(prompt_modalities_)),
      params(std::move(params_)) {
  num_prompt_tokens = static_cast<int32_t>(token_ids.size());
  VLM_CHECK(num_prompt_tokens > 0, "sequence {} has an empty prompt", id);
  VLM_CHECK(prompt_modalities.empty() || static_cast<int32_t>(prompt_modalities.size()) == num_prompt_tokens,
            "sequence {}: {} modality tags for {} prompt tokens", id, prompt_modalities.size(), num_prompt_tokens);
  num_forks_pending = params.n - 1;
  if (params.constraint) constraint_state = params.constraint->initial_state();
}

}  // namespace vlm
