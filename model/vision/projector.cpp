#include "model/vision/projector.h"

#include "kernels/gemm/gemm.h"
#include "kernels/ops/vision_ops.h"

namespace vlm {

LlavaProjector::LlavaProjector(const WeightLookup& w, const std::string& prefix, int64_t in_features,
                               int64_t out_features, bool bias)
    : in_(in_features), out_(out_features) {
  w1_ = w(prefix + "linear_1.weight", {out_, in_});
  w2_ = w(prefix + "linear_2.weight", {out_, out_});
  if (bias) {
    for (auto [name, dst] : {std::pair{"linear_1.bias", &b1_}, std::pair{"linear_2.bias", &b2_}}) {
      TensorView b = w(prefix + name, {out_});
      dst->resize(static_cast<size_t>(out_));
      convert_to_f32(b.data, b.dtype, dst->data(), out_);
    }
  }
}

void LlavaProjector::forward(const float* x, int64_t M, float* y) const {
  Tensor h = Tensor::empty({M, out_});
  linear(x, M, w1_, b1_.empty() ? nullptr : b1_.data(), h.as<float>());
  gelu_erf(h.as<float>(), M * out_);
  linear(h.as<float>(), M, w2_, b2_.empty() ? nullptr : b2_.data(), y);
}

}  // namespace vlm
