// LlavaMultiModalProjector: out = linear_2(gelu(linear_1(features))), biases optional
// (multimodal_projector_bias). f32 compute over weights in their stored dtype.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/vision/clip_vision.h"

namespace vlm {

class LlavaProjector {
 public:
  // Loads prefix + "linear_1.{weight,bias}" [C, Fin] and "linear_2.{weight,bias}" [C, C].
  LlavaProjector(const WeightLookup& weights, const std::string& prefix, int64_t in_features,
                 int64_t out_features, bool bias);
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  // x[M, Fin] -> y[M, C].
  void forward(const float* x, int64_t M, float* y) const;

 private:
  int64_t in_, out_;
  TensorView w1_, w2_;
  std::vector<float> b1_, b2_;  // empty without biases
};

}  // namespace vlm
