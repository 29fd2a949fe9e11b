// Step: one forward call's state as the layers of a backend see it. Architectures treat it as
// opaque (they only ask it for the activations of their plan); each backend's layers downcast
// it to their own step (CpuStep: the ForwardBatch, the KV-cache layers, the embedding override,
// the logits; CudaStep: the step's device metadata and stream).
#pragma once

#include <cstdint>

#include "model/layers/act.h"

namespace vlm {

class Step {
 public:
  virtual ~Step() = default;
  virtual int64_t num_tokens() const = 0;      // T
  virtual int64_t num_logit_rows() const = 0;  // R
  // Buffer i of the architecture's ActivationPlan, [T or R, cols]; valid for the step.
  virtual Act act(int i) = 0;
  // The step's logits [R, V] f32 (the head writes them).
  virtual Act logits(int64_t vocab) = 0;
};

}  // namespace vlm
