#include "engine/backends/cpu_backend.h"

#include <algorithm>

#include "kernels/core/check.h"
#include "kernels/core/thread_pool.h"

namespace vlm {

CpuBackend::CpuBackend(const LlmDecoder& decoder, const KVCacheShape& shape, std::vector<int32_t> eos_token_ids)
    : decoder_(decoder), cache_(shape) {
  for (int i = 0; i < global_thread_pool().num_threads(); ++i) samplers_.emplace_back(decoder.config().vocab_size, eos_token_ids);
}

void CpuBackend::forward(const ForwardBatch& batch, const EmbeddingOverride& override) {
  decoder_.forward(batch, cache_.layers(), logits_, override);
}

void CpuBackend::sample(std::span<const SampleTask> tasks, std::vector<SampleResult>& results) {
  const int64_t V = decoder_.config().vocab_size;
  const auto n = static_cast<int64_t>(tasks.size());
  results.assign(tasks.size(), SampleResult{});
  // Each sequence draws from its own RNG, so the order (and the thread) does not matter.
  const int64_t workers = std::min<int64_t>(n, static_cast<int64_t>(samplers_.size()));
  global_thread_pool().run_tasks(workers, [&](int64_t w) {
    for (int64_t i = w; i < n; i += workers) results[i] = samplers_[w].sample(logits_.data() + tasks[i].row * V, *tasks[i].seq);
  });
}

std::shared_ptr<const DeviceEmbeddings> StepBackend::encode_media(std::span<const MediaPixels* const> /*items*/,
                                                                 std::vector<std::shared_ptr<const void>> /*owners*/) {
  VLM_CHECK(false, "this backend does not encode media (encodes_media() is false)");
  return nullptr;
}

}  // namespace vlm
