// A linear layer's parts as the host holds them: views into the checkpoint (a weight of more than
// two dims read as [N, rest]; row ranges sliced, no copy) and biases converted to f32. Every
// backend's linear layer starts from these (the CPU computes over them, the GPU uploads them).
#pragma once

#include <vector>

#include "kernels/core/tensor.h"
#include "model/layers/weight_source.h"

namespace vlm {

struct HostLinearPart {
  TensorView w;  // [N_i, K] in the stored dtype
  Tensor bias;   // [N_i] f32, or empty
};

std::vector<HostLinearPart> load_linear_parts(const WeightSource& w, const std::vector<LinearPart>& parts);

}  // namespace vlm
