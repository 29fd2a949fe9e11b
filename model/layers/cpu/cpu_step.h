// CpuStep: one forward call on the CPU as its layers see it — for a decoder call the batch, the
// KV-cache layers, the embedding override and the logits vector; for an encoder call (a vision
// tower) only a row count — plus the plan's activations (f32, allocated for the call) and
// scratch buffers the layers reuse within the call.
#pragma once

#include <span>
#include <vector>

#include "kernels/attention/paged_kv.h"
#include "kernels/core/aligned_scratch.h"
#include "kernels/core/tensor.h"
#include "model/decoder/embedding_override.h"
#include "model/decoder/forward_batch.h"
#include "model/layers/step.h"

namespace vlm {

class CpuStep final : public Step {
 public:
  // Scratch slots: one buffer each, grown on demand, kept for the call.
  enum Scratch { kRopeTable, kNormOut, kLinearOut, kAttnOut, kPatches, kPatchOut, kMoeIn, kMoeOut, kNumScratch };

  // A decoder call. Checks the batch's arrays agree on T > 0 (InternalError otherwise).
  CpuStep(const ActivationPlan& plan, const ForwardBatch& batch, std::span<const PagedKVLayer> kv,
          const EmbeddingOverride& override, std::vector<float>& logits);
  // An encoder call over `tokens` rows (no batch, no cache, no logits).
  CpuStep(const ActivationPlan& plan, int64_t tokens);

  int64_t num_tokens() const override { return tokens_; }
  int64_t num_logit_rows() const override;
  Act act(int i) override;
  Act logits(int64_t vocab) override;
  float* scratch(Scratch slot, int64_t n);  // n floats, contents unspecified

  // The decoder call's parts (InternalError on an encoder call).
  const ForwardBatch& batch() const;
  std::span<const PagedKVLayer> kv() const { return kv_; }  // one per decoder layer
  const EmbeddingOverride& override() const;

  // A layer's view of the step it was given (InternalError when another backend made it).
  static CpuStep& of(Step& s);

 private:
  const ActivationPlan& plan_;
  int64_t tokens_ = 0;
  const ForwardBatch* batch_ = nullptr;
  std::span<const PagedKVLayer> kv_;
  const EmbeddingOverride* override_ = nullptr;
  std::vector<float>* logits_ = nullptr;
  std::vector<Tensor> acts_;  // by plan index, made on first use
  AlignedScratch scratch_[kNumScratch];  // 64-byte aligned, not zeroed
};

}  // namespace vlm
