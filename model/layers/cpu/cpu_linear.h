// CpuNorm and CpuLinear: the CPU's norms and linear layers. CpuLinear computes y = n(x) W^T
// (+ bias) for one weight (linear()) or several parts of the same input (linear_multi(): one pass
// over x), part i written as a plane [M, N_i] after the previous parts' planes; n, its optional
// pre-norm, writes into the step's scratch first. Weights are views into the checkpoint in their
// stored dtype; biases f32 copies. A residual add (Accum::Add) computes into scratch, then adds
// (the same bits as the pre-layer decoder).
#pragma once

#include <memory>
#include <vector>

#include "kernels/core/tensor.h"
#include "model/layers/layer_specs.h"
#include "model/layers/layers.h"
#include "model/layers/linear_parts.h"

namespace vlm {

class CpuNorm final : public Norm {
 public:
  CpuNorm(const WeightSource& w, const NormSpec& spec);
  void forward(Step& s, Act x, Act h) const override { apply(x.f32(), x.rows, h.f32()); }
  void apply(const float* x /*[T,C]*/, int64_t T, float* y /*[T,C], may be x*/) const;

 private:
  NormSpec spec_;
  TensorView weight_, bias_;  // [C]
};

class CpuLinear final : public Linear {
 public:
  using Part = HostLinearPart;
  explicit CpuLinear(std::vector<Part> parts, std::unique_ptr<CpuNorm> pre_norm = nullptr);
  int64_t out_features() const override { return n_; }
  void forward(Step& s, Act x, Act y, Accum a) const override;
  void forward_rows(Step& s, Act x, Act y) const override;

 private:
  void product(Step& s, const float* x, int64_t M, float* y, Accum a) const;
  std::vector<Part> parts_;
  std::unique_ptr<CpuNorm> pre_norm_;
  int64_t n_ = 0, k_ = 0;
};

std::unique_ptr<CpuNorm> make_cpu_norm(const WeightSource& w, const NormSpec* spec);  // null spec: null

}  // namespace vlm
