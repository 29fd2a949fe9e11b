// LlavaMultiModalProjector: out = linear_2(gelu(linear_1(features))), biases optional
// (multimodal_projector_bias): the Mlp of model/arch/llava_wiring.h (llava_projector_spec) run on
// CpuLayers, plus its weights by role for a copy on another device (model/vision/cuda).
// f32 compute over weights in their stored dtype.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/vision/clip_vision.h"

namespace vlm {

class Mlp;

class LlavaProjector {
 public:
  // Loads prefix + "linear_1.{weight,bias}" [C, Fin] and "linear_2.{weight,bias}" [C, C].
  LlavaProjector(const WeightLookup& weights, const std::string& prefix, int64_t in_features,
                 int64_t out_features, bool bias);
  ~LlavaProjector();
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  // x[M, Fin] -> y[M, C].
  void forward(const float* x, int64_t M, float* y) const;

  // The weights, for a copy on another device (model/vision/cuda).
  const TensorView& w1() const { return w1_; }  // [C, Fin]
  const TensorView& w2() const { return w2_; }  // [C, C]
  const std::vector<float>& b1() const { return b1_; }  // [C] or empty
  const std::vector<float>& b2() const { return b2_; }

 private:
  int64_t in_, out_;
  TensorView w1_, w2_;
  std::vector<float> b1_, b2_;  // empty without biases
  std::unique_ptr<LayerBackend> backend_;  // CpuLayers
  std::unique_ptr<Mlp> mlp_;
};

}  // namespace vlm
