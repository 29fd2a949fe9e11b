#include "engine/backends/cpu_backend.h"

namespace vlm {

CpuBackend::CpuBackend(const LlmDecoder& decoder, const KVCacheShape& shape, std::vector<int32_t> eos_token_ids)
    : decoder_(decoder), cache_(shape), sampler_(decoder.config().vocab_size, std::move(eos_token_ids)) {}

void CpuBackend::forward(const ForwardBatch& batch, const EmbeddingOverride& override) {
  decoder_.forward(batch, cache_.layers(), logits_, override);
}

void CpuBackend::sample(std::span<const SampleTask> tasks, std::vector<SampleResult>& results) {
  const int64_t V = sampler_.vocab_size();
  results.clear();
  for (const SampleTask& t : tasks) results.push_back(sampler_.sample(logits_.data() + t.row * V, *t.seq));
}

}  // namespace vlm
