// CpuBackend: the StepBackend of the CPU (today's exact path): LlmDecoder::forward over a
// KVCache in host memory, then the Sampler on each logits row.
#pragma once

#include <memory>

#include "engine/backends/step_backend.h"
#include "engine/scheduling/kv_cache.h"

namespace vlm {

class CpuBackend : public StepBackend {
 public:
  // Allocates the cache (throws std::bad_alloc when it does not fit). decoder outlives this.
  CpuBackend(const LlmDecoder& decoder, const KVCacheShape& shape, std::vector<int32_t> eos_token_ids);

  std::string device() const override { return "cpu"; }
  int64_t num_kv_blocks() const override { return cache_.shape().num_blocks; }
  int64_t kv_bytes_per_block() const override { return cache_.shape().bytes_per_block(); }
  DType kv_dtype() const override { return cache_.shape().dtype; }
  void copy_block(int32_t src, int32_t dst) override { cache_.copy_block(src, dst); }
  void forward(const ForwardBatch& batch, const EmbeddingOverride& override) override;
  void sample(std::span<const SampleTask> tasks, std::vector<SampleResult>& results) override;

 private:
  const LlmDecoder& decoder_;
  KVCache cache_;
  Sampler sampler_;
  std::vector<float> logits_;  // [R, V] of the last forward
};

}  // namespace vlm
