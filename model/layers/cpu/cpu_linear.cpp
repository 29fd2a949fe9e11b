#include "model/layers/cpu/cpu_linear.h"

#include <algorithm>

#include "kernels/core/check.h"
#include "kernels/gemm/gemm.h"
#include "kernels/ops/ops.h"
#include "kernels/ops/vision_ops.h"
#include "model/layers/cpu/cpu_step.h"

namespace vlm {
namespace {

const float* bias_of(const CpuLinear::Part& p) { return p.bias.data() ? p.bias.as<float>() : nullptr; }

}  // namespace

CpuNorm::CpuNorm(const WeightSource& w, const NormSpec& spec) : spec_(spec), weight_(w.get(spec.weight)) {
  if (!spec.bias.empty()) bias_ = w.get(spec.bias, spec.weight.shape);
  VLM_CHECK(spec.kind == NormKind::Rms || !bias_.empty(), "LayerNorm {} without a bias", spec.weight.name);
}

void CpuNorm::apply(const float* x, int64_t T, float* y) const {
  if (spec_.kind == NormKind::Rms) rms_norm(x, weight_, spec_.eps, T, y);
  else layer_norm(x, weight_, bias_, spec_.eps, T, y);
}

std::unique_ptr<CpuNorm> make_cpu_norm(const WeightSource& w, const NormSpec* spec) {
  return spec ? std::make_unique<CpuNorm>(w, *spec) : nullptr;
}

CpuLinear::CpuLinear(std::vector<Part> parts, std::unique_ptr<CpuNorm> pre_norm)
    : parts_(std::move(parts)), pre_norm_(std::move(pre_norm)) {
  VLM_CHECK(!parts_.empty(), "a linear layer of no parts");
  k_ = parts_.front().w.dim(1);
  for (const Part& p : parts_) {
    VLM_CHECK(p.w.dim(1) == k_, "linear parts of {} and {} inputs", k_, p.w.dim(1));
    n_ += p.w.dim(0);
  }
}

void CpuLinear::forward(Step& st, Act x, Act y, Accum a) const {
  const float* in = x.f32();
  if (pre_norm_) {
    float* h = CpuStep::of(st).scratch(CpuStep::kNormOut, x.rows * k_);
    pre_norm_->apply(x.f32(), x.rows, h);
    in = h;
  }
  product(st, in, x.rows, y.f32(), a);
}

void CpuLinear::forward_rows(Step& st, Act x, Act y) const {
  CpuStep& s = CpuStep::of(st);
  const std::vector<int32_t>& rows = s.batch().logits_indices;
  const auto R = static_cast<int64_t>(rows.size());
  float* sel = s.scratch(CpuStep::kNormOut, R * k_);  // [R, K]
  for (int64_t r = 0; r < R; ++r) {
    const int32_t row = rows[static_cast<size_t>(r)];
    VLM_CHECK(row >= 0 && row < x.rows, "logits index {} outside the batch of {}", row, x.rows);
    std::copy(x.f32() + row * k_, x.f32() + (row + 1) * k_, sel + r * k_);
  }
  if (pre_norm_) pre_norm_->apply(sel, R, sel);
  product(st, sel, R, y.f32(), Accum::Write);
}

void CpuLinear::product(Step& st, const float* x, int64_t M, float* y, Accum a) const {
  float* out = y;
  if (a == Accum::Add) {
    VLM_CHECK(parts_.size() == 1, "a residual add into a linear of {} parts", parts_.size());
    out = CpuStep::of(st).scratch(CpuStep::kLinearOut, M * n_);
  }
  if (parts_.size() == 1) {
    linear(x, M, parts_[0].w, bias_of(parts_[0]), out);
  } else {  // one pass over x for every part, each into its plane
    std::vector<LinearTarget> targets;
    float* plane = out;
    for (const Part& p : parts_) {
      targets.push_back({&p.w, bias_of(p), plane});
      plane += M * p.w.dim(0);
    }
    linear_multi(x, M, targets);
  }
  if (a == Accum::Add) add_inplace(y, out, M * n_);
}

}  // namespace vlm
