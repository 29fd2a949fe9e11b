// LlavaVision: LLaVA's vision side (transformers 5.17 LlavaModel.get_image_features) written once
// over the layer vocabulary: the CLIP / SigLIP tower (model/arch/clip_vision_tower.h) up to the
// deepest of `vision_feature_layer`, the selected hidden states side by side (class row dropped
// for the "default" strategy), then LlavaMultiModalProjector: linear_2(gelu(linear_1(features)))
// as one Mlp (GeluErf; biases per multimodal_projector_bias).
#pragma once

#include <memory>
#include <vector>

#include "model/arch/clip_vision_tower.h"

namespace vlm {

// The projector's tensors, names relative to its prefix: "linear_1.*" [out, in], "linear_2.*"
// [out, out] (biases only when `bias`).
MlpSpec llava_projector_spec(int64_t in_features, int64_t out_features, bool bias);

struct LlavaVisionSpec {
  ClipVisionConfig vision;
  std::vector<int> feature_layers;  // hidden-state indices in [0, vision.num_layers]
  bool drop_cls = true;
  int64_t out_features = 0;         // the text model's width
  bool projector_bias = true;

  int64_t tokens_per_image() const { return vision.num_positions() - (drop_cls ? 1 : 0); }  // Ti
  int64_t features() const { return vision.hidden_size * static_cast<int64_t>(feature_layers.size()); }  // Fin
};

class LlavaVision {
 public:
  // `tower`: the tower's tensors (ClipVisionTower); `projector`: "linear_1.*", "linear_2.*".
  LlavaVision(const LlavaVisionSpec& spec, LayerBackend& backend, const WeightSource& tower,
              const WeightSource& projector);
  ~LlavaVision();

  const LlavaVisionSpec& spec() const { return spec_; }
  // The activations of a call over N images (the tower's, then the features and the projector's).
  ActivationPlan plan(int64_t N) const;
  // pixels [N, 3*S*S] -> the selected features [N*Ti, Fin].
  void features(Step& s, Act pixels, Act feats) const;
  // pixels [N, 3*S*S] -> image embeddings [N*Ti, out_features] (the projector's output).
  void forward(Step& s, Act pixels, Act out) const;

 private:
  LlavaVisionSpec spec_;
  std::unique_ptr<ClipVisionTower> tower_;
  std::unique_ptr<Mlp> projector_;
  int feats_ = 0;  // plan index of the features [N*Ti, Fin]; the projector's inner one after it
};

}  // namespace vlm
