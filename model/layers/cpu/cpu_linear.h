// CpuLinear: y = x W^T (+ bias) on the CPU for one weight or several parts of the same input
// (linear() for one part, linear_multi() for several: one pass over x), part i written as a plane
// [M, N_i] after the previous parts' planes. Weights are views into the checkpoint in their
// stored dtype; biases f32 copies. A residual add (Accum::Add) computes into the step's scratch,
// then adds (the same bits as the pre-layer decoder).
#pragma once

#include <vector>

#include "kernels/core/tensor.h"
#include "model/layers/layers.h"
#include "model/layers/weight_source.h"

namespace vlm {

class CpuLinear final : public Linear {
 public:
  struct Part {
    TensorView w;  // [N_i, K]
    Tensor bias;   // [N_i] f32, or empty
  };
  explicit CpuLinear(std::vector<Part> parts);
  int64_t out_features() const override { return n_; }
  void forward(Step& st, Act x, Act y, Accum a) const override;
  const std::vector<Part>& parts() const { return parts_; }

 private:
  std::vector<Part> parts_;
  int64_t n_ = 0;
};

// The parts as views into the checkpoint (a weight of more than two dims read as [N, rest]; row
// ranges sliced), biases converted to f32.
std::vector<CpuLinear::Part> load_cpu_linear_parts(const WeightSource& w, const std::vector<LinearPart>& parts);

}  // namespace vlm
