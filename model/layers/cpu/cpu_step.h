// CpuStep: one forward call on the CPU as its layers see it — the batch, the KV-cache layers,
// the embedding override, the logits vector — plus the plan's activations (f32, allocated for the
// call) and scratch buffers the layers reuse within the call.
#pragma once

#include <span>
#include <vector>

#include "kernels/attention/paged_kv.h"
#include "kernels/core/tensor.h"
#include "model/decoder/embedding_override.h"
#include "model/decoder/forward_batch.h"
#include "model/layers/step.h"

namespace vlm {

class CpuStep final : public Step {
 public:
  // Scratch slots: one buffer each, grown on demand, kept for the call.
  enum Scratch { kRopeTable, kLinearOut, kNumScratch };

  // Checks the batch's arrays agree on T > 0 (InternalError otherwise).
  CpuStep(const ActivationPlan& plan, const ForwardBatch& batch, std::span<const PagedKVLayer> kv,
          const EmbeddingOverride& override, std::vector<float>& logits);

  int64_t num_tokens() const override { return batch.num_tokens(); }
  int64_t num_logit_rows() const override { return static_cast<int64_t>(batch.logits_indices.size()); }
  Act act(int i) override;
  Act logits(int64_t vocab) override;
  float* scratch(Scratch slot, int64_t n);  // n floats, contents unspecified

  // A layer's view of the step it was given (InternalError when another backend made it).
  static CpuStep& of(Step& s);

  const ForwardBatch& batch;
  const std::span<const PagedKVLayer> kv;  // one per decoder layer
  const EmbeddingOverride& override;

 private:
  const ActivationPlan& plan_;
  std::vector<float>& logits_;
  std::vector<Tensor> acts_;                 // by plan index, made on first use
  std::vector<float> scratch_[kNumScratch];
};

}  // namespace vlm
