// RandomWeights: random bf16 checkpoint tensors for the GPU vision benchmark (bench_cuda_vision),
// served to the encoders' weight lookups (name, shape) -> TensorView. Values are uniform in
// [-0.03, 0.03] (norm weights: 1 +- 0.03) from a 64-bit LCG seeded by the tensor's NAME alone
// (FNV-1a of the name), so a tensor's values do not depend on the order in which an encoder asks
// for its weights: a refactored encoder that loads the same names in another order gets the same
// weights, and its output rows can be compared bit for bit with the old one's (issue 39).
// The store owns the tensors; it must outlive the encoders built from it.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>

#include "kernels/core/tensor.h"

namespace vlm::bench {

class RandomWeights {
 public:
  // The tensor `name` of `shape` (made on first use; the same tensor after).
  TensorView operator()(const std::string& name, const Shape& shape) {
    auto it = store_.find(name);
    if (it == store_.end()) it = store_.emplace(name, make(name, shape)).first;
    return it->second.view();
  }

 private:
  static Tensor make(const std::string& name, const Shape& shape) {
    Tensor t = Tensor::empty(shape, DType::BF16);
    uint64_t s = 14695981039346656037ULL;  // FNV-1a 64 of the name
    for (unsigned char ch : name) s = (s ^ ch) * 1099511628211ULL;
    const bool norm_w = (name.find("norm") != std::string::npos || name.find("ln_q") != std::string::npos) &&
                        name.find("weight") != std::string::npos;
    const float a = 0.03f;
    auto* p = static_cast<uint16_t*>(t.data());
    for (int64_t i = 0; i < t.numel(); ++i) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      const float u = (static_cast<float>(s >> 40) / 16777216.0f * 2.0f - 1.0f) * a + (norm_w ? 1.0f : 0.0f);
      uint32_t bits;
      std::memcpy(&bits, &u, 4);
      p[i] = static_cast<uint16_t>(bits >> 16);  // truncated to bf16
    }
    return t;
  }

  std::map<std::string, Tensor> store_;
};

}  // namespace vlm::bench
