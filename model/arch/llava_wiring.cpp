// Restated from transformers 5.17 modeling_llava.py (get_image_features,
// LlavaMultiModalProjector); no code taken.
#include "model/arch/llava_wiring.h"

#include <algorithm>

#include "kernels/core/check.h"

namespace vlm {

MlpSpec llava_projector_spec(int64_t in, int64_t out, bool bias) {
  return {MlpKind::GeluErf, in, out, {}, {{"linear_1.weight", {out, in}}, bias ? "linear_1.bias" : ""},
          {{"linear_2.weight", {out, out}}, bias ? "linear_2.bias" : ""}, std::nullopt};
}

namespace {
int64_t deepest(const std::vector<int>& layers) {
  VLM_CHECK(!layers.empty(), "no vision feature layers");
  return *std::max_element(layers.begin(), layers.end());
}
}  // namespace

LlavaVision::LlavaVision(const LlavaVisionSpec& spec, LayerBackend& b, const WeightSource& tower,
                         const WeightSource& projector)
    : spec_(spec) {
  tower_ = std::make_unique<ClipVisionTower>(spec.vision, b, tower, deepest(spec.feature_layers));
  projector_ = b.mlp(projector, llava_projector_spec(spec.features(), spec.out_features, spec.projector_bias));
  feats_ = static_cast<int>(tower_->plan(1).bufs.size());  // the tower's buffers come first
}

LlavaVision::~LlavaVision() = default;

ActivationPlan LlavaVision::plan(int64_t N) const {
  ActivationPlan p = tower_->plan(N);
  const int64_t R = N * spec_.tokens_per_image();
  p.bufs.push_back({spec_.features(), ActRole::Hidden, false, R});          // feats_: [N*Ti, Fin]
  p.bufs.push_back({projector_->inner_cols(), ActRole::Hidden, false, R});  // feats_ + 1: [N*Ti, C]
  return p;
}

void LlavaVision::features(Step& s, Act pixels, Act feats) const {
  tower_->forward(s, pixels, spec_.feature_layers, spec_.drop_cls, feats);
}

void LlavaVision::forward(Step& s, Act pixels, Act out) const {
  const Act feats = s.act(feats_);  // [N*Ti, Fin]
  features(s, pixels, feats);
  projector_->forward(s, feats, s.act(feats_ + 1), out, Accum::Write);
}

}  // namespace vlm
