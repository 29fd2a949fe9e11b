#include "model/layers/cuda/cuda_layers.h"

#include <cuda_runtime_api.h>

#include <string>

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/device_upload.h"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/gemm/gemv_norm.h"
#include "kernels/cuda/ops/ops_cuda.h"
#include "kernels/ops/rope.h"
#include "model/layers/cuda/cuda_step.h"
#include "model/layers/linear_parts.h"

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

// An RMSNorm folded into (or run before) a linear layer on the GPU: weight [K] f32.
struct CudaPreNorm {
  cuda::DeviceBuffer w;
  float eps = 0;
};

std::unique_ptr<CudaPreNorm> upload_pre_norm(const WeightSource& w, const NormSpec* spec, int64_t* bytes) {
  if (spec == nullptr) return nullptr;
  if (spec->kind != NormKind::Rms)
    throw LoadError("a LayerNorm before a linear layer (" + w.prefix() + spec->weight.name +
                    ") does not run on the GPU layers yet");
  auto n = std::make_unique<CudaPreNorm>();
  n->w = cuda::upload_converted({w.get(spec->weight)}, DType::F32, bytes);
  n->eps = spec->eps;
  return n;
}

// y = x W^T (+ bias) (+ y): the GEMV for few 16-bit rows, else cuBLASLt (CudaDecoder's choice).
void product(CudaStep& s, const void* x, const void* w, const void* bias, void* y, DType out_dt, bool accumulate,
             int64_t M, int64_t N, int64_t K) {
  if (cuda::gemv_supported(M, K, s.dt))
    cuda::gemv(x, w, s.dt, bias, y, out_dt, accumulate, M, N, K, s.stream);
  else
    s.gemm->linear(x, w, s.dt, bias, y, out_dt, accumulate ? 1.0f : 0.0f, M, N, K, s.stream);
}

class CudaEmbedding final : public Embedding {
 public:
  CudaEmbedding(TensorView table, DType dt, int64_t* bytes)
      : table_(cuda::upload_converted({table}, dt, bytes)), dt_(dt), V_(table.dim(0)), C_(table.dim(1)) {}
  const void* table() const { return table_.get(); }
  int64_t vocab() const { return V_; }
  int64_t width() const { return C_; }

  void forward(Step& st, Act x) const override {
    CudaStep& s = CudaStep::of(st);
    const int64_t T = s.T, C = C_;
    float* xp = x.f32();
    cuda::embedding(table_.get(), dt_, s.ids, T, C, xp, s.stream);
    const EmbeddingOverride& o = *s.override;
    for (int64_t i = 0; i < o.num_device_runs; ++i) {  // media rows encoded on this GPU
      const DeviceRowRun& r = o.device_runs[i];
      VLM_CHECK(r.row >= 0 && r.n >= 0 && r.row + r.n <= T, "device embedding run [{}, +{}) of {} rows", r.row, r.n, T);
      VLM_CUDA_CHECK(cudaMemcpyAsync(xp + r.row * C, r.src, static_cast<size_t>(r.n * C) * 4, cudaMemcpyDeviceToDevice,
                                     s.stream));
    }
    if (o.use == nullptr) return s.mark("upload_embed_rope_table");
    VLM_CHECK(o.embeds != nullptr, "embedding override without embeddings");
    VLM_CHECK(o.num_planes == 1, "media rows of {} planes (DeepStack): the GPU decoder takes one", o.num_planes);
    for (int64_t t = 0; t < T;) {  // each run of host media rows in one copy (pageable memory)
      if (!o.use[t]) {
        ++t;
        continue;
      }
      int64_t e = t;
      while (e < T && o.use[e]) ++e;
      VLM_CUDA_CHECK(cudaMemcpyAsync(xp + t * C, o.embeds + t * C, static_cast<size_t>((e - t) * C) * 4,
                                     cudaMemcpyHostToDevice, s.stream));
      t = e;
    }
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
    VLM_CHECK(x.dtype == DType::F32, "the GPU's RMSNorm reads an f32 residual");
    cuda::rms_norm(x.f32(), nullptr, pre_->w.as<float>(), pre_->eps, nullptr, x.rows, x.cols, h.data, h.dtype, s.stream);
  }

 private:
  std::unique_ptr<CudaPreNorm> pre_;
};

// A linear layer's weights on the GPU: the parts concatenated [N, K] (dt), their biases in dt and
// in f32 (the dtype of the output they are added to), or none.
struct DeviceLinear {
  cuda::DeviceBuffer w, bias_dt, bias_f32;
  int64_t N = 0, K = 0;
  const void* bias(DType out) const {
    if (!bias_dt.get()) return nullptr;
    return out == DType::F32 ? bias_f32.get() : bias_dt.get();
  }
};

DeviceLinear upload_linear(const WeightSource& src, const std::vector<LinearPart>& parts, DType dt, bool weights,
                           int64_t* bytes) {
  const std::vector<HostLinearPart> host = load_linear_parts(src, parts);
  DeviceLinear d;
  std::vector<TensorView> ws, bs;
  for (const HostLinearPart& p : host) {
    ws.push_back(p.w);
    d.N += p.w.dim(0);
    if (p.bias.data()) bs.push_back(p.bias.view());
  }
  d.K = host.front().w.dim(1);
  VLM_CHECK(bs.empty() || bs.size() == host.size(), "{}{}: a bias on some parts only", src.prefix(),
            parts.front().weight.name);
  if (weights) d.w = cuda::upload_converted(std::span<const TensorView>(ws), dt, bytes);
  if (!bs.empty()) {
    d.bias_dt = cuda::upload_converted(std::span<const TensorView>(bs), dt, bytes);
    d.bias_f32 = cuda::upload_converted(std::span<const TensorView>(bs), DType::F32, bytes);
  }
  return d;
}

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
    if (pre_ && s.fused_norm && cuda::gemv_norm_supported(M, K, s.dt)) {  // the norm inside the GEMV
      cuda::gemv_norm(x.f32(), nullptr, pre_->w.as<float>(), pre_->eps, weight_, s.dt, d_.bias(y.dtype), y.data,
                      y.dtype, add, M, N, K, s.stream);
    } else {
      const void* in = x.data;
      if (pre_) {
        void* h = s.scratch(CudaScratch::kNormOut, M * K * static_cast<int64_t>(dtype_size(s.dt)));
        cuda::rms_norm(x.f32(), nullptr, pre_->w.as<float>(), pre_->eps, nullptr, M, K, h, s.dt, s.stream);
        s.mark("norm");
        in = h;
      }
      product(s, in, weight_, d_.bias(y.dtype), y.data, y.dtype, add, M, N, K);
    }
    s.mark(label_.c_str());
  }

  void forward_rows(Step& st, Act x, Act y) const override {
    CudaStep& s = CudaStep::of(st);
    VLM_CHECK(pre_ != nullptr, "{}: the GPU gathers logit rows through the norm before the head", label_);
    const int64_t R = s.R, N = d_.N, K = d_.K;
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
      sec0_ = c.mrope_section[0];
      sec1_ = c.mrope_section[1];
    }
    inv_freq_ = cuda::upload_converted({cuda::f32_view(rope.inv_freq())}, DType::F32, nullptr);
  }
  RopeRows build(Step& st) const override {
    CudaStep& s = CudaStep::of(st);
    auto* table = static_cast<float*>(s.scratch(CudaScratch::kRopeTable, s.T * 2 * half_ * 4));  // [T, 2 half] f32
    cuda::rope_table(s.pos, s.mrope, sec0_, sec1_, inv_freq_.as<float>(), half_, scaling_, s.T, table, s.stream);
    return RopeRows{table, 2 * half_};
  }

 private:
  cuda::DeviceBuffer inv_freq_;
  int half_ = 0, sec0_ = 0, sec1_ = 0;
  float scaling_ = 1.0f;
};

class CudaCausalAttention final : public CausalAttention {
 public:
  explicit CudaCausalAttention(const AttentionSpec& spec) : spec_(spec) {}
  Act forward(Step& st, Act qkv, const RopeRows& rope) const override {
    CudaStep& s = CudaStep::of(st);
    VLM_CHECK(s.attention != nullptr, "a GPU step without an attention runner");
    return s.attention->attend(spec_.layer, qkv, rope);
  }

 private:
  AttentionSpec spec_;
};

// down(silu(gate n(x)) * up n(x)): for few 16-bit rows the norm, gate/up and SiLU·mul in one
// GEMV (or gate/up and SiLU·mul after the norm), else a GEMM into [T, 2I] and silu_mul.
class CudaGatedMlp final : public Mlp {
 public:
  CudaGatedMlp(const WeightSource& w, const MlpSpec& spec, DType dt, int64_t* bytes)
      : I_(spec.inner),
        gate_up_(upload_linear(w, {spec.gate, spec.up}, dt, true, bytes)),
        down_(upload_linear(w, {spec.down}, dt, true, bytes)),
        pre_(upload_pre_norm(w, spec.pre_norm ? &*spec.pre_norm : nullptr, bytes)) {}
  int64_t inner_cols() const override { return 2 * I_; }

  void forward(Step& st, Act x, Act inner, Act y, Accum a) const override {
    CudaStep& s = CudaStep::of(st);
    const int64_t T = x.rows, C = gate_up_.K, I = I_;
    const DType dt = s.dt;
    void* act = s.scratch(CudaScratch::kAct, T * I * static_cast<int64_t>(dtype_size(dt)));  // [T, I]
    const void* gu_bias = gate_up_.bias(dt);
    if (pre_ && s.fused_norm && cuda::gemv_norm_supported(T, C, dt)) {  // norm, gate/up and SiLU·mul in one pass
      cuda::gemv_silu_mul_norm(x.f32(), nullptr, pre_->w.as<float>(), pre_->eps, gate_up_.w.get(), dt, gu_bias, act, T, I,
                               C, s.stream);
    } else {
      const void* in = x.data;
      if (pre_) {
        void* h = s.scratch(CudaScratch::kNormOut, T * C * static_cast<int64_t>(dtype_size(dt)));
        cuda::rms_norm(x.f32(), nullptr, pre_->w.as<float>(), pre_->eps, nullptr, T, C, h, dt, s.stream);
        s.mark("norm");
        in = h;
      }
      if (cuda::gemv_supported(T, C, dt)) {  // gate/up and SiLU·mul in one pass
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

[[noreturn]] void not_yet(const char* what) {
  throw LoadError(std::string(what) + " does not run on the GPU layers yet (docs/WRITTEN_ONCE.md step 5b)");
}

}  // namespace

CudaLayers::CudaLayers(DType dt) : dt_(dt) {
  VLM_CHECK(dt == DType::F32 || dt == DType::BF16 || dt == DType::F16, "GPU dtype {} (F32, BF16 or F16)", dtype_name(dt));
}

std::unique_ptr<Embedding> CudaLayers::embedding(const WeightSource& w, const WeightRef& table) {
  return std::make_unique<CudaEmbedding>(w.get(table), dt_, &bytes_);
}

std::unique_ptr<Norm> CudaLayers::norm(const WeightSource& w, const NormSpec& spec) {
  return std::make_unique<CudaNorm>(w, spec, &bytes_);
}

std::unique_ptr<Linear> CudaLayers::linear(const WeightSource& w, const std::vector<LinearPart>& parts,
                                           const NormSpec* pre_norm) {
  return std::make_unique<CudaLinear>(upload_linear(w, parts, dt_, true, &bytes_), nullptr,
                                      upload_pre_norm(w, pre_norm, &bytes_), profile_label(parts.front().weight.name));
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

std::unique_ptr<CausalAttention> CudaLayers::causal_attention(const WeightSource&, const AttentionSpec& spec,
                                                              const RopeTable&) {
  if (spec.qk_norm()) not_yet("the per-head q/k RMSNorm (q_norm / k_norm, Qwen3)");
  return std::make_unique<CudaCausalAttention>(spec);
}

std::unique_ptr<Mlp> CudaLayers::mlp(const WeightSource& w, const MlpSpec& spec) {
  if (spec.kind != MlpKind::GatedSilu) not_yet("an MLP other than the gated SiLU one");
  return std::make_unique<CudaGatedMlp>(w, spec, dt_, &bytes_);
}

std::unique_ptr<SegmentAttention> CudaLayers::segment_attention(const SegmentAttentionSpec&) {
  not_yet("attention within segments (vision towers)");
}

std::unique_ptr<VisionRopeTable> CudaLayers::vision_rope_table(const VisionRopeSpec&) {
  not_yet("the 2-D vision rope table");
}

std::unique_ptr<RowOps> CudaLayers::row_ops() { not_yet("row gathers between activations"); }

std::unique_ptr<LearnedRows> CudaLayers::learned_rows(const WeightSource&, const WeightRef&) {
  not_yet("learned rows (LLaVA-OneVision's image_newline)");
}

std::unique_ptr<PatchEmbedding> CudaLayers::patch_embedding(const WeightSource&, const PatchEmbeddingSpec&) {
  not_yet("the patch embedding of CLIP / SigLIP");
}

}  // namespace vlm
