#include "model/layers/cpu/cpu_step.h"

#include "kernels/core/check.h"

namespace vlm {

CpuStep::CpuStep(const ActivationPlan& plan, const ForwardBatch& b, std::span<const PagedKVLayer> kv,
                 const EmbeddingOverride& ovr, std::vector<float>& logits)
    : plan_(plan), tokens_(b.num_tokens()), batch_(&b), kv_(kv), override_(&ovr), logits_(&logits),
      acts_(plan.bufs.size()) {
  VLM_CHECK(tokens_ > 0, "empty batch");
  VLM_CHECK(static_cast<int64_t>(b.positions.size()) == tokens_ &&
                static_cast<int64_t>(b.slot_mapping.size()) == tokens_,
            "batch arrays disagree on the token count {}", tokens_);
}

CpuStep::CpuStep(const ActivationPlan& plan, int64_t tokens) : plan_(plan), tokens_(tokens), acts_(plan.bufs.size()) {
  VLM_CHECK(tokens > 0, "an encoder call over no rows");
}

int64_t CpuStep::num_logit_rows() const {
  return batch_ ? static_cast<int64_t>(batch_->logits_indices.size()) : 0;
}

const ForwardBatch& CpuStep::batch() const {
  VLM_CHECK(batch_ != nullptr, "a decoder layer run in an encoder call");
  return *batch_;
}

const EmbeddingOverride& CpuStep::override() const {
  VLM_CHECK(override_ != nullptr, "a decoder layer run in an encoder call");
  return *override_;
}

Act CpuStep::act(int i) {
  VLM_CHECK(i >= 0 && i < static_cast<int>(acts_.size()), "activation {} outside a plan of {}", i, acts_.size());
  const ActivationPlan::Buf& b = plan_.bufs[static_cast<size_t>(i)];
  const int64_t rows = b.rows > 0 ? b.rows : b.logit_rows ? num_logit_rows() : num_tokens();
  Tensor& t = acts_[static_cast<size_t>(i)];
  if (t.data() == nullptr) t = Tensor::empty({std::max<int64_t>(rows, 1), b.cols});
  return Act{t.data(), rows, b.cols, DType::F32};
}

Act CpuStep::logits(int64_t vocab) {
  VLM_CHECK(logits_ != nullptr, "logits asked of an encoder call");
  logits_->resize(static_cast<size_t>(num_logit_rows() * vocab));
  return Act{logits_->data(), num_logit_rows(), vocab, DType::F32};
}

float* CpuStep::scratch(Scratch slot, int64_t n) { return scratch_[slot].get(static_cast<size_t>(std::max<int64_t>(n, 1))); }

CpuStep& CpuStep::of(Step& s) {
  auto* c = dynamic_cast<CpuStep*>(&s);
  VLM_CHECK(c != nullptr, "a CPU layer was given another backend's step");
  return *c;
}

}  // namespace vlm
