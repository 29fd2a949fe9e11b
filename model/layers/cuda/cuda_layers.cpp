#include "model/layers/cuda/cuda_layers.h"

#include "model/layers/cuda/cuda_collective.h"

#include <cuda_runtime_api.h>

#include <string>

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/device_upload.h"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/gemm/gemv_norm.h"
#include "kernels/cuda/ops/ops_cuda.h"
#include "kernels/cuda/ops/vision_ops_cuda.h"
#include "kernels/ops/rope.h"
#include "model/layers/cuda/cuda_device_linear.h"
#include "model/layers/cuda/cuda_media_rows.h"
#include "model/layers/cuda/cuda_moe.h"
#include "model/layers/cuda/cuda_fp8_linear.h"
#include "model/layers/cuda/cuda_step.h"
#include "model/layers/cuda/cuda_vision_layers.h"

namespace vlm {
namespace {

// The label of a layer in the step profile: its first weight's name without the layer prefix and
// ".weight" (e.g. "self_attn.q_proj", "lm_head").
std::string profile_label(const std::string& weight) {
  std::string n = weight;
  if (const size_t dot = n.rfind(".weight"); dot != std::string::npos && dot + 7 == n.size()) n.resize(dot);
  if (const size_t l = n.find("layers."); l != std::string::npos) {
    const size_t next = n.find('.', l + 7);
    if (next != std::string::npos) n = n.substr(next + 1);
  }
  return n;
}

// y = x W^T (+ bias) (+ y): the GEMV for few 16-bit rows, else cuBLASLt (CudaDecoder's choice).
void product(CudaStep& s, const void* x, const void* w, const void* bias, void* y, DType out_dt, bool accumulate,
             int64_t M, int64_t N, int64_t K) {
  cuda_product(s, x, w, bias, y, out_dt, accumulate, M, N, K);
}

class CudaEmbedding final : public Embedding {
 public:
  CudaEmbedding(TensorView table, DType dt, int64_t* bytes)
      : table_(cuda::upload_converted({table}, dt, bytes)), dt_(dt), V_(table.dim(0)), C_(table.dim(1)) {}
  const void* table() const { return table_.get(); }
  int64_t vocab() const { return V_; }
  int64_t width() const { return C_; }

  // The token rows, then the step's media rows over them (cuda_media_rows.h: with DeepStack's
  // planes on the device for add_override_plane).
  void forward(Step& st, Act x) const override {
    CudaStep& s = CudaStep::of(st);
    cuda::embedding(table_.get(), dt_, s.ids, s.T, C_, x.f32(), s.stream);
    upload_media_rows(s, C_, x.f32());
    s.mark("upload_embed_rope_table");
  }

 private:
  cuda::DeviceBuffer table_;  // [V, C] dt
  DType dt_;
  int64_t V_, C_;
};

class CudaNorm final : public Norm {
 public:
  CudaNorm(const WeightSource& w, const NormSpec& spec, int64_t* bytes) : pre_(upload_pre_norm(w, &spec, bytes)) {}
  void forward(Step& st, Act x, Act h) const override {
    CudaStep& s = CudaStep::of(st);
    VLM_CHECK(x.dtype == DType::F32, "the GPU's norms read an f32 residual");
    pre_->apply(x.f32(), x.rows, x.cols, h.data, h.dtype, s.stream);
  }

 private:
  std::unique_ptr<CudaPreNorm> pre_;
};

class CudaLinear final : public Linear {
 public:
  // shared: the weight of another layer (a tied head over the embedding table), else owned.
  CudaLinear(DeviceLinear d, const void* shared, std::unique_ptr<CudaPreNorm> pre_norm, std::string label)
      : d_(std::move(d)), weight_(shared ? shared : d_.w.get()), pre_(std::move(pre_norm)), label_(std::move(label)) {}
  int64_t out_features() const override { return d_.N; }

  void forward(Step& st, Act x, Act y, Accum a) const override {
    CudaStep& s = CudaStep::of(st);
    const int64_t M = x.rows, N = d_.N, K = d_.K;
    const bool add = a == Accum::Add;
    if (d_.fp8() && pre_ && fp8_product_norm(s, d_, *pre_, x.f32(), y.data, y.dtype, add, M)) {
      // FP8 weights, few rows: the norm inside the FP8 GEMV
    } else if (d_.fp8()) {  // FP8 weights: the norm apart, then the FP8 GEMV or GEMM
      const void* in = x.data;
      if (pre_) {
        void* h = s.scratch(CudaScratch::kNormOut, M * K * static_cast<int64_t>(dtype_size(s.dt)));
        pre_->apply(x.f32(), M, K, h, s.dt, s.stream);
        s.mark("norm");
        in = h;
      }
      fp8_product(s, d_, in, y.data, y.dtype, add, M);
    } else if (pre_ && pre_->rms && s.fused_norm && cuda::gemv_norm_supported(M, K, s.dt)) {  // the norm inside the GEMV
      cuda::gemv_norm(x.f32(), nullptr, pre_->w.as<float>(), pre_->eps, weight_, s.dt, d_.bias(y.dtype), y.data,
                      y.dtype, add, M, N, K, s.stream);
    } else {
      const void* in = x.data;
      if (pre_) {
        void* h = s.scratch(CudaScratch::kNormOut, M * K * static_cast<int64_t>(dtype_size(s.dt)));
        pre_->apply(x.f32(), M, K, h, s.dt, s.stream);
        s.mark("norm");
        in = h;
      }
      product(s, in, weight_, d_.bias(y.dtype), y.data, y.dtype, add, M, N, K);
    }
    s.mark(label_.c_str());
  }

  void forward_rows(Step& st, Act x, Act y) const override {
    CudaStep& s = CudaStep::of(st);
    VLM_CHECK(pre_ != nullptr && pre_->rms, "{}: the GPU gathers logit rows through the RMSNorm before the head", label_);
    const int64_t R = s.R, N = d_.N, K = d_.K;
    VLM_CHECK(!d_.fp8(), "{}: an FP8 layer gathering logit rows (the LM head stays 16-bit)", label_);
    if (R == 0) return;
    if (s.fused_norm && cuda::gemv_norm_supported(R, K, s.dt)) {  // the final norm of the rows in the GEMV
      cuda::gemv_norm(x.f32(), s.rows, pre_->w.as<float>(), pre_->eps, weight_, s.dt, d_.bias(y.dtype), y.data, y.dtype,
                      false, R, N, K, s.stream);
    } else {
      void* sel = s.scratch(CudaScratch::kNormOut, R * K * static_cast<int64_t>(dtype_size(s.dt)));
      cuda::rms_norm(x.f32(), nullptr, pre_->w.as<float>(), pre_->eps, s.rows, R, K, sel, s.dt, s.stream);
      product(s, sel, weight_, d_.bias(y.dtype), y.data, y.dtype, false, R, N, K);
    }
    s.mark(label_.c_str());
  }

 private:
  DeviceLinear d_;
  const void* weight_;  // [N, K] dt
  std::unique_ptr<CudaPreNorm> pre_;
  std::string label_;
};

class CudaRopeTable final : public RopeTable {
 public:
  explicit CudaRopeTable(const RopeConfig& c) {
    const RotaryEmbedding rope(c);
    half_ = static_cast<int>(rope.inv_freq().size());
    scaling_ = rope.attention_scaling();
    if (!c.mrope_section.empty()) {
      VLM_CHECK(c.mrope_section.size() == 3, "mrope_section of {} entries", c.mrope_section.size());
      axes_.s0 = c.mrope_section[0];
      axes_.s1 = c.mrope_section[1];
      axes_.s2 = c.mrope_section[2];
      axes_.interleaved = c.mrope_interleaved;
    }
    inv_freq_ = cuda::upload_converted({cuda::f32_view(rope.inv_freq())}, DType::F32, nullptr);
  }
  RopeRows build(Step& st) const override {
    CudaStep& s = CudaStep::of(st);
    auto* table = static_cast<float*>(s.scratch(CudaScratch::kRopeTable, s.T * 2 * half_ * 4));  // [T, 2 half] f32
    cuda::rope_table(s.pos, s.mrope, axes_, inv_freq_.as<float>(), half_, scaling_, s.T, table, s.stream);
    return RopeRows{table, 2 * half_};
  }

 private:
  cuda::DeviceBuffer inv_freq_;
  int half_ = 0;
  cuda::MropeAxes axes_;
  float scaling_ = 1.0f;
};

// The runner's [q/k norm (Qwen3),] rope, KV write and attention.
class CudaCausalAttention final : public CausalAttention {
 public:
  CudaCausalAttention(const AttentionSpec& spec, std::unique_ptr<CudaPreNorm> q_norm, std::unique_ptr<CudaPreNorm> k_norm)
      : spec_(spec), q_norm_(std::move(q_norm)), k_norm_(std::move(k_norm)) {}
  Act forward(Step& st, Act qkv, const RopeRows& rope) const override {
    CudaStep& s = CudaStep::of(st);
    VLM_CHECK(s.attention != nullptr, "a GPU step without an attention runner");
    cuda::HeadNorm norm;
    if (q_norm_) {
      norm.q_w = q_norm_->w.as<float>();
      norm.k_w = k_norm_->w.as<float>();
      norm.eps = q_norm_->eps;
    }
    return s.attention->attend(spec_.layer, qkv, rope, norm);
  }

 private:
  AttentionSpec spec_;
  std::unique_ptr<CudaPreNorm> q_norm_, k_norm_;  // [D] f32 each, or null
};

// down(silu(gate n(x)) * up n(x)): for few 16-bit rows the norm, gate/up and SiLU·mul in one
// GEMV (or gate/up and SiLU·mul after the norm), else a GEMM into [T, 2I] and silu_mul.
class CudaGatedMlp final : public Mlp {
 public:
  // gate_up [2I, C] (gate rows, then up rows) and down [C, I], both 16-bit or both FP8.
  CudaGatedMlp(const MlpSpec& spec, DeviceLinear gate_up, DeviceLinear down, std::unique_ptr<CudaPreNorm> pre_norm)
      : I_(spec.inner), gate_up_(std::move(gate_up)), down_(std::move(down)), pre_(std::move(pre_norm)) {}
  int64_t inner_cols() const override { return 2 * I_; }

  void forward(Step& st, Act x, Act inner, Act y, Accum a) const override {
    CudaStep& s = CudaStep::of(st);
    const int64_t T = x.rows, C = gate_up_.K, I = I_;
    const DType dt = s.dt;
    void* act = s.scratch(CudaScratch::kAct, T * I * static_cast<int64_t>(dtype_size(dt)));  // [T, I]
    const void* gu_bias = gate_up_.bias(dt);
    if (gate_up_.fp8()) return fp8_gated_mlp(s, gate_up_, down_, pre_.get(), I, x, inner, act, y, a == Accum::Add);
    if (pre_ && pre_->rms && s.fused_norm && cuda::gemv_norm_supported(T, C, dt)) {  // norm, gate/up, SiLU·mul: one pass
      cuda::gemv_silu_mul_norm(x.f32(), nullptr, pre_->w.as<float>(), pre_->eps, gate_up_.w.get(), dt, gu_bias, act, T, I,
                               C, s.stream);
    } else {
      const void* in = x.data;
      if (pre_) {
        void* h = s.scratch(CudaScratch::kNormOut, T * C * static_cast<int64_t>(dtype_size(dt)));
        pre_->apply(x.f32(), T, C, h, dt, s.stream);
        s.mark("norm");
        in = h;
      }
      if (s.gemv && cuda::gemv_supported(T, C, dt)) {  // gate/up and SiLU·mul in one pass
        cuda::gemv_silu_mul(in, gate_up_.w.get(), dt, gu_bias, act, T, I, C, s.stream);
      } else {
        s.gemm->linear(in, gate_up_.w.get(), dt, gu_bias, inner.data, dt, 0.0f, T, 2 * I, C, s.stream);  // [T, 2I]
        s.mark("gemm_gate_up");
        cuda::silu_mul(inner.data, T, I, act, dt, s.stream);
      }
    }
    s.mark("silu_mul");
    product(s, act, down_.w.get(), down_.bias(y.dtype), y.data, y.dtype, a == Accum::Add, T, down_.N, I);
    s.mark("gemm_down");
  }

 private:
  int64_t I_;
  DeviceLinear gate_up_, down_;
  std::unique_ptr<CudaPreNorm> pre_;
};

// down(act(up n(x))): the GEMM into inner [T, I] (dt, up's bias in dt), the activation in place,
// the down GEMM (its bias in y's dtype; the residual add in its epilogue): the vision blocks'
// fc1 -> act -> fc2, the Qwen2-VL merger and LLaVA's projector, as the towers ran them.
class CudaMlp final : public Mlp {
 public:
  CudaMlp(const WeightSource& w, const MlpSpec& spec, DType dt, int64_t* bytes)
      : I_(spec.inner),
        up_(upload_linear(w, {spec.up}, dt, true, bytes)),
        down_(upload_linear(w, {spec.down}, dt, true, bytes)),
        pre_(upload_pre_norm(w, spec.pre_norm ? &*spec.pre_norm : nullptr, bytes)),
        act_(spec.kind == MlpKind::QuickGelu ? cuda::Activation::QuickGelu
             : spec.kind == MlpKind::GeluTanh ? cuda::Activation::GeluTanh
                                              : cuda::Activation::GeluErf) {
    VLM_CHECK(up_.N == I_ && down_.K == I_, "MLP {}{}: inner {} for weights [{}, {}] and [{}, {}]", w.prefix(),
              spec.up.weight.name, I_, up_.N, up_.K, down_.N, down_.K);
  }
  int64_t inner_cols() const override { return I_; }

  void forward(Step& st, Act x, Act inner, Act y, Accum a) const override {
    CudaStep& s = CudaStep::of(st);
    const int64_t T = x.rows, C = up_.K, I = I_;
    const DType dt = s.dt;
    VLM_CHECK(x.cols == C && inner.cols >= I && inner.dtype == dt, "MLP over [{}, {}] with inner [{}, {}] {}", T, x.cols,
              inner.rows, inner.cols, dtype_name(inner.dtype));
    const void* in = x.data;
    if (pre_) {
      void* h = s.scratch(CudaScratch::kNormOut, T * C * static_cast<int64_t>(dtype_size(dt)));
      pre_->apply(x.f32(), T, C, h, dt, s.stream);
      s.mark("norm");
      in = h;
    } else {
      VLM_CHECK(x.dtype == dt, "MLP input {} on a {} step", dtype_name(x.dtype), dtype_name(dt));
    }
    product(s, in, up_.w.get(), up_.bias(dt), inner.data, dt, false, T, I, C);
    cuda::activation(inner.data, dt, T * I, act_, s.stream);
    s.mark("mlp_up_act");
    product(s, inner.data, down_.w.get(), down_.bias(y.dtype), y.data, y.dtype, a == Accum::Add, T, down_.N, I);
    s.mark("mlp_down");
  }

 private:
  int64_t I_;
  DeviceLinear up_, down_;
  std::unique_ptr<CudaPreNorm> pre_;
  cuda::Activation act_;
};

}  // namespace

CudaLayers::CudaLayers(DType dt, CudaFp8 fp8) : dt_(dt), fp8_(fp8) {
  VLM_CHECK(dt == DType::F32 || dt == DType::BF16 || dt == DType::F16, "GPU dtype {} (F32, BF16 or F16)", dtype_name(dt));
  if (fp8 == CudaFp8::kAll && dt != DType::BF16)
    throw LoadError(std::string("--quantization fp8 computes in bfloat16 on the GPU, not ") + dtype_name(dt) +
                    " (--dtype bfloat16 or auto)");
}

bool CudaLayers::fp8_layer(const WeightSource& w, const LinearPart& first, const std::string& label) const {
  // The LM head stays 16-bit: lm_head, or the tied embedding table a vocabulary-split head reads
  // under tensor parallelism.
  if (fp8_ == CudaFp8::kNone || label == "lm_head" || label.ends_with(".lm_head") || label == "embed_tokens" ||
      label.ends_with(".embed_tokens"))
    return false;
  if (fp8_ == CudaFp8::kStored && !w.fp8(first.weight)) return false;
  if (dt_ != DType::BF16)
    throw LoadError(w.prefix() + first.weight.name + ": FP8 weights compute in bfloat16 on the GPU, not " +
                    dtype_name(dt_) + " (--dtype bfloat16 or auto)");
  return true;
}

DeviceLinear CudaLayers::upload(const WeightSource& w, const std::vector<LinearPart>& parts, bool fp8) {
  return fp8 ? upload_linear_fp8(w, parts, &bytes_) : upload_linear(w, parts, dt_, true, &bytes_);
}

std::unique_ptr<Embedding> CudaLayers::embedding(const WeightSource& w, const WeightRef& table) {
  return std::make_unique<CudaEmbedding>(w.get(table), dt_, &bytes_);
}

std::unique_ptr<Norm> CudaLayers::norm(const WeightSource& w, const NormSpec& spec) {
  return std::make_unique<CudaNorm>(w, spec, &bytes_);
}

std::unique_ptr<Linear> CudaLayers::linear(const WeightSource& w, const std::vector<LinearPart>& parts,
                                           const NormSpec* pre_norm) {
  const std::string label = profile_label(parts.front().weight.name);
  auto l = std::make_unique<CudaLinear>(upload(w, parts, fp8_layer(w, parts.front(), label)), nullptr,
                                        upload_pre_norm(w, pre_norm, &bytes_), label);
  return l;
}

std::unique_ptr<Linear> CudaLayers::tied_linear(const Embedding& table, const WeightSource& w, const NormSpec* pre_norm) {
  const auto* e = dynamic_cast<const CudaEmbedding*>(&table);
  VLM_CHECK(e != nullptr, "a GPU tied linear over another backend's embedding");
  DeviceLinear d;
  d.N = e->vocab();
  d.K = e->width();
  return std::make_unique<CudaLinear>(std::move(d), e->table(), upload_pre_norm(w, pre_norm, &bytes_), "lm_head");
}

std::unique_ptr<RopeTable> CudaLayers::rope_table(const RopeConfig& rope) { return std::make_unique<CudaRopeTable>(rope); }

std::unique_ptr<CausalAttention> CudaLayers::causal_attention(const WeightSource& w, const AttentionSpec& spec,
                                                              const RopeTable&) {
  VLM_CHECK(spec.q_norm.has_value() == spec.k_norm.has_value(), "attention layer {}: q_norm without k_norm or the "
            "reverse", spec.layer);
  std::unique_ptr<CudaPreNorm> q_norm, k_norm;
  if (spec.qk_norm()) {
    VLM_CHECK(spec.q_norm->kind == NormKind::Rms && spec.k_norm->kind == NormKind::Rms,
              "attention layer {}: a q/k norm other than RMSNorm", spec.layer);
    VLM_CHECK(spec.q_norm->eps == spec.k_norm->eps, "attention layer {}: q_norm eps {} and k_norm eps {} differ",
              spec.layer, spec.q_norm->eps, spec.k_norm->eps);
    q_norm = upload_pre_norm(w, &*spec.q_norm, &bytes_);  // q first: errors name q's weight
    k_norm = upload_pre_norm(w, &*spec.k_norm, &bytes_);
  }
  return std::make_unique<CudaCausalAttention>(spec, std::move(q_norm), std::move(k_norm));
}

std::unique_ptr<Mlp> CudaLayers::mlp(const WeightSource& w, const MlpSpec& spec) {
  if (spec.kind != MlpKind::GatedSilu) return std::make_unique<CudaMlp>(w, spec, dt_, &bytes_);
  const bool fp8 = fp8_layer(w, spec.gate, profile_label(spec.gate.weight.name));
  DeviceLinear gate_up = upload(w, {spec.gate, spec.up}, fp8);
  DeviceLinear down = upload(w, {spec.down}, fp8);
  return std::make_unique<CudaGatedMlp>(spec, std::move(gate_up), std::move(down),
                                        upload_pre_norm(w, spec.pre_norm ? &*spec.pre_norm : nullptr, &bytes_));
}

std::unique_ptr<Mlp> CudaLayers::moe(const WeightSource& w, const MoeSpec& spec) {
  return make_cuda_moe(w, spec, dt_, &bytes_);
}

std::unique_ptr<SegmentAttention> CudaLayers::segment_attention(const SegmentAttentionSpec& spec) {
  return make_cuda_segment_attention(spec);
}

std::unique_ptr<VisionRopeTable> CudaLayers::vision_rope_table(const VisionRopeSpec& spec) {
  return make_cuda_vision_rope_table(spec);
}

std::unique_ptr<RowOps> CudaLayers::row_ops() { return make_cuda_row_ops(); }

std::unique_ptr<LearnedRows> CudaLayers::learned_rows(const WeightSource& w, const WeightRef& table) {
  return make_cuda_learned_rows(w, table, &bytes_);
}

std::unique_ptr<PatchEmbedding> CudaLayers::patch_embedding(const WeightSource& w, const PatchEmbeddingSpec& spec) {
  return make_cuda_patch_embedding(w, spec, dt_, &bytes_);
}

std::unique_ptr<PositionTable> CudaLayers::position_table(const WeightSource& w, const PositionTableSpec& spec) {
  return make_cuda_position_table(w, spec, &bytes_);
}

std::unique_ptr<Collective> CudaLayers::collective(Communicator& comm) { return make_cuda_collective(comm); }

}  // namespace vlm
