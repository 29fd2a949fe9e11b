#include "model/vision/projector.h"

#include "model/arch/llava_wiring.h"
#include "model/layers/cpu/cpu_layers.h"
#include "model/layers/cpu/cpu_step.h"

namespace vlm {

LlavaProjector::LlavaProjector(const WeightLookup& lookup, const std::string& prefix, int64_t in_features,
                               int64_t out_features, bool bias)
    : in_(in_features), out_(out_features) {
  const WeightSource w(lookup, prefix);
  const MlpSpec spec = llava_projector_spec(in_, out_, bias);
  backend_ = std::make_unique<CpuLayers>();
  mlp_ = backend_->mlp(w, spec);
  // The same tensors by role (names from the spec).
  w1_ = w.get(spec.up.weight);
  w2_ = w.get(spec.down.weight);
  for (auto [part, dst] : {std::pair{&spec.up, &b1_}, std::pair{&spec.down, &b2_}}) {
    if (part->bias.empty()) continue;
    TensorView b = w.get(part->bias, {out_});
    dst->resize(static_cast<size_t>(out_));
    convert_to_f32(b.data, b.dtype, dst->data(), out_);
  }
}

LlavaProjector::~LlavaProjector() = default;

void LlavaProjector::forward(const float* x, int64_t M, float* y) const {
  ActivationPlan plan;
  plan.bufs.push_back({mlp_->inner_cols(), ActRole::Hidden, false, M});  // [M, C]
  CpuStep step(plan, M);
  mlp_->forward(step, Act{const_cast<float*>(x), M, in_, DType::F32}, step.act(0), Act{y, M, out_, DType::F32},
                Accum::Write);
}

}  // namespace vlm
