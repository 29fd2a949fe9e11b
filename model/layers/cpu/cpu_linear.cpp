#include "model/layers/cpu/cpu_linear.h"

#include "kernels/core/check.h"
#include "kernels/gemm/gemm.h"
#include "kernels/ops/ops.h"
#include "model/layers/cpu/cpu_step.h"

namespace vlm {
namespace {

const float* bias_of(const CpuLinear::Part& p) { return p.bias.data() ? p.bias.as<float>() : nullptr; }

}  // namespace

CpuLinear::CpuLinear(std::vector<Part> parts) : parts_(std::move(parts)) {
  VLM_CHECK(!parts_.empty(), "a linear layer of no parts");
  for (const Part& p : parts_) n_ += p.w.dim(0);
}

void CpuLinear::forward(Step& st, Act x, Act y, Accum a) const {
  const int64_t M = x.rows;
  float* out = y.f32();
  if (a == Accum::Add) {
    VLM_CHECK(parts_.size() == 1, "a residual add into a linear of {} parts", parts_.size());
    out = CpuStep::of(st).scratch(CpuStep::kLinearOut, M * n_);
  }
  if (parts_.size() == 1) {
    linear(x.f32(), M, parts_[0].w, bias_of(parts_[0]), out);
  } else {  // one pass over x for every part, each into its plane
    std::vector<LinearTarget> targets;
    float* plane = out;
    for (const Part& p : parts_) {
      targets.push_back({&p.w, bias_of(p), plane});
      plane += M * p.w.dim(0);
    }
    linear_multi(x.f32(), M, targets);
  }
  if (a == Accum::Add) add_inplace(y.f32(), out, M * n_);
}

std::vector<CpuLinear::Part> load_cpu_linear_parts(const WeightSource& w, const std::vector<LinearPart>& parts) {
  std::vector<CpuLinear::Part> loaded;
  for (const LinearPart& p : parts) {
    TensorView t = w.get(p.weight);
    const int64_t N = t.dim(0), K = t.numel() / std::max<int64_t>(N, 1);
    const int64_t b = p.row_begin, e = p.row_end < 0 ? N : p.row_end;
    VLM_CHECK(0 <= b && b < e && e <= N, "rows [{}, {}) of {} ({} rows)", b, e, p.weight.name, N);
    const size_t elt = dtype_size(t.dtype);
    CpuLinear::Part part{TensorView(static_cast<char*>(t.data) + b * K * static_cast<int64_t>(elt), t.dtype, {e - b, K}), {}};
    if (!p.bias.empty()) {
      const TensorView bias = w.get(p.bias, {N});
      part.bias = Tensor::empty({e - b}, DType::F32);
      convert_to_f32(static_cast<const char*>(bias.data) + b * static_cast<int64_t>(dtype_size(bias.dtype)), bias.dtype,
                     part.bias.as<float>(), e - b);
    }
    loaded.push_back(std::move(part));
  }
  return loaded;
}

}  // namespace vlm
