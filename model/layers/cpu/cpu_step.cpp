#include "model/layers/cpu/cpu_step.h"

#include "kernels/core/check.h"

namespace vlm {

CpuStep::CpuStep(const ActivationPlan& plan, const ForwardBatch& b, std::span<const PagedKVLayer> kv_layers,
                 const EmbeddingOverride& ovr, std::vector<float>& logits)
    : batch(b), kv(kv_layers), override(ovr), plan_(plan), logits_(logits), acts_(plan.bufs.size()) {
  const int64_t T = b.num_tokens();
  VLM_CHECK(T > 0, "empty batch");
  VLM_CHECK(static_cast<int64_t>(b.positions.size()) == T && static_cast<int64_t>(b.slot_mapping.size()) == T,
            "batch arrays disagree on the token count {}", T);
}

Act CpuStep::act(int i) {
  VLM_CHECK(i >= 0 && i < static_cast<int>(acts_.size()), "activation {} outside a plan of {}", i, acts_.size());
  const ActivationPlan::Buf& b = plan_.bufs[static_cast<size_t>(i)];
  const int64_t rows = b.logit_rows ? num_logit_rows() : num_tokens();
  Tensor& t = acts_[static_cast<size_t>(i)];
  if (t.data() == nullptr) t = Tensor::empty({std::max<int64_t>(rows, 1), b.cols});
  return Act{t.data(), rows, b.cols, DType::F32};
}

Act CpuStep::logits(int64_t vocab) {
  logits_.resize(static_cast<size_t>(num_logit_rows() * vocab));
  return Act{logits_.data(), num_logit_rows(), vocab, DType::F32};
}

float* CpuStep::scratch(Scratch slot, int64_t n) {
  std::vector<float>& v = scratch_[slot];
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

CpuStep& CpuStep::of(Step& s) {
  auto* c = dynamic_cast<CpuStep*>(&s);
  VLM_CHECK(c != nullptr, "a CPU layer was given another backend's step");
  return *c;
}

}  // namespace vlm
