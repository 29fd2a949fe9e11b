#include "model/layers/cpu/cpu_layers.h"

#include <algorithm>
#include <cstring>

#include "kernels/core/check.h"
#include "kernels/gemm/gemm.h"
#include "kernels/ops/ops.h"
#include "kernels/ops/vision_ops.h"
#include "model/decoder/attention_layer.h"
#include "model/layers/cpu/cpu_linear.h"
#include "model/layers/cpu/cpu_moe.h"
#include "model/layers/cpu/cpu_step.h"
#include "model/layers/cpu/cpu_vision_layers.h"

namespace vlm {
namespace {

class CpuEmbedding final : public Embedding {
 public:
  explicit CpuEmbedding(TensorView table) : table_(table) {}
  const TensorView& table() const { return table_; }

  void forward(Step& st, Act x) const override {
    CpuStep& s = CpuStep::of(st);
    const ForwardBatch& b = s.batch();
    const int64_t T = b.num_tokens(), C = table_.dim(1);
    const EmbeddingOverride& o = s.override();
    VLM_CHECK(o.num_device_runs == 0, "device-memory media rows given to the CPU decoder");
    if (o.use == nullptr) {
      embedding_lookup(table_, b.token_ids.data(), T, x.f32());
      return;
    }
    VLM_CHECK(o.embeds != nullptr, "embedding override without embeddings");
    std::vector<int32_t> ids(b.token_ids);  // overridden rows look up row 0, then get replaced
    for (int64_t t = 0; t < T; ++t)
      if (o.use[t]) ids[t] = 0;
    embedding_lookup(table_, ids.data(), T, x.f32());
    const int64_t stride = o.num_planes * C;  // plane 0 of each row
    for (int64_t t = 0; t < T; ++t)
      if (o.use[t]) std::copy(o.embeds + t * stride, o.embeds + t * stride + C, x.f32() + t * C);
  }

 private:
  TensorView table_;  // [V, C]
};

class CpuRopeTable final : public RopeTable {
 public:
  explicit CpuRopeTable(const RopeConfig& c) : rope_(c) {}
  const RotaryEmbedding& rotary() const { return rope_; }

  RopeRows build(Step& st) const override {
    CpuStep& s = CpuStep::of(st);
    const ForwardBatch& b = s.batch();
    const int64_t T = b.num_tokens();
    const int64_t R = std::max<int64_t>(static_cast<int64_t>(rope_.inv_freq().size()) * 2, 1);
    float* table = s.scratch(CpuStep::kRopeTable, T * R);  // [T, R]
    if (!b.mrope_positions.empty()) {
      VLM_CHECK(static_cast<int64_t>(b.mrope_positions.size()) == 3 * T, "{} M-RoPE positions for {} tokens",
                b.mrope_positions.size(), T);
      rope_.cos_sin_table_mrope(b.mrope_positions.data(), T, table);
    } else {
      rope_.cos_sin_table(b.positions.data(), T, table);
    }
    return RopeRows{table, R};
  }

 private:
  RotaryEmbedding rope_;
};

class CpuCausalAttention final : public CausalAttention {
 public:
  CpuCausalAttention(const AttentionSpec& spec, const RotaryEmbedding& rope, std::unique_ptr<CpuNorm> q_norm,
                     std::unique_ptr<CpuNorm> k_norm)
      : spec_(spec),
        rope_(rope),
        q_norm_(std::move(q_norm)),
        k_norm_(std::move(k_norm)),
        attention_(HeadSlice{static_cast<int>(spec.head_begin), static_cast<int>(spec.total_heads),
                             static_cast<int>(spec.kv_head_begin), static_cast<int>(spec.total_kv_heads)}) {}

  Act forward(Step& st, Act qkv, const RopeRows& rope) const override {
    CpuStep& s = CpuStep::of(st);
    const int64_t T = qkv.rows, H = spec_.num_heads, Hkv = spec_.num_kv_heads, D = spec_.head_dim;
    VLM_CHECK(spec_.layer < static_cast<int>(s.kv().size()), "no KV layer {} of {}", spec_.layer, s.kv().size());
    const PagedKVLayer& kv = s.kv()[static_cast<size_t>(spec_.layer)];
    VLM_CHECK(kv.num_kv_heads == Hkv && kv.head_dim == D, "KV layer {} is {}x{}, model needs {}x{}", spec_.layer,
              kv.num_kv_heads, kv.head_dim, Hkv, D);
    float* q = qkv.f32();  // planes [T, H*D], [T, Hkv*D], [T, Hkv*D]
    float* k = q + T * H * D;
    float* v = k + T * Hkv * D;
    if (q_norm_) q_norm_->apply(q, T * H, q);      // per head: rows [T*H, D]
    if (k_norm_) k_norm_->apply(k, T * Hkv, k);    // rows [T*Hkv, D]
    rope_.apply_cached(q, H, k, Hkv, static_cast<const float*>(rope.table), T);
    float* out = s.scratch(CpuStep::kAttnOut, T * H * D);  // [T, H*D]
    attention_.forward(spec_.layer, q, k, v, static_cast<int>(H), kv, s.batch(), spec_.scale, out);
    return Act{out, T, H * D, DType::F32};
  }

 private:
  AttentionSpec spec_;
  const RotaryEmbedding& rope_;
  std::unique_ptr<CpuNorm> q_norm_, k_norm_;  // [D] each, or null
  AttentionLayer attention_;  // the exact path and the methods' hooks
};

class CpuMlp final : public Mlp {
 public:
  CpuMlp(const WeightSource& w, const MlpSpec& spec)
      : spec_(spec),
        in_(load_linear_parts(w, gated() ? std::vector<LinearPart>{spec.gate, spec.up} : std::vector<LinearPart>{spec.up}),
            make_cpu_norm(w, spec.pre_norm ? &*spec.pre_norm : nullptr)),
        down_(load_linear_parts(w, {spec.down})) {}
  int64_t inner_cols() const override { return gated() ? 2 * spec_.inner : spec_.inner; }

  void forward(Step& s, Act x, Act inner, Act y, Accum a) const override {
    const int64_t T = x.rows, I = spec_.inner;
    in_.forward(s, x, inner, Accum::Write);  // gated: planes gate [T, I], up [T, I]; else [T, I]
    float* f = inner.f32();
    switch (spec_.kind) {
      case MlpKind::GatedSilu: silu_mul(f, f + T * I, T, I, f); break;  // in place
      case MlpKind::QuickGelu: quick_gelu(f, T * I); break;
      case MlpKind::GeluErf: gelu_erf(f, T * I); break;
      case MlpKind::GeluTanh: gelu_tanh(f, T * I); break;
    }
    down_.forward(s, Act{f, T, I, DType::F32}, y, a);
  }

 private:
  bool gated() const { return spec_.kind == MlpKind::GatedSilu; }
  MlpSpec spec_;
  CpuLinear in_, down_;
};

}  // namespace

std::unique_ptr<Embedding> CpuLayers::embedding(const WeightSource& w, const WeightRef& table) {
  return std::make_unique<CpuEmbedding>(w.get(table));
}

std::unique_ptr<Norm> CpuLayers::norm(const WeightSource& w, const NormSpec& spec) {
  return std::make_unique<CpuNorm>(w, spec);
}

std::unique_ptr<Linear> CpuLayers::linear(const WeightSource& w, const std::vector<LinearPart>& parts,
                                          const NormSpec* pre_norm) {
  return std::make_unique<CpuLinear>(load_linear_parts(w, parts), make_cpu_norm(w, pre_norm));
}

std::unique_ptr<Linear> CpuLayers::tied_linear(const Embedding& table, const WeightSource& w, const NormSpec* pre_norm) {
  const auto* e = dynamic_cast<const CpuEmbedding*>(&table);
  VLM_CHECK(e != nullptr, "a CPU tied linear over another backend's embedding");
  std::vector<CpuLinear::Part> parts;
  parts.push_back({e->table(), {}});
  return std::make_unique<CpuLinear>(std::move(parts), make_cpu_norm(w, pre_norm));
}

std::unique_ptr<RopeTable> CpuLayers::rope_table(const RopeConfig& rope) {
  return std::make_unique<CpuRopeTable>(rope);
}

std::unique_ptr<CausalAttention> CpuLayers::causal_attention(const WeightSource& w, const AttentionSpec& spec,
                                                             const RopeTable& rope) {
  const auto* r = dynamic_cast<const CpuRopeTable*>(&rope);
  VLM_CHECK(r != nullptr, "a CPU attention over another backend's rope table");
  VLM_CHECK(spec.q_norm.has_value() == spec.k_norm.has_value(), "attention layer {}: q_norm without k_norm or the "
            "reverse", spec.layer);
  for (const auto* n : {&spec.q_norm, &spec.k_norm})
    if (n->has_value())
      VLM_CHECK((*n)->kind == NormKind::Rms && (*n)->weight.shape == Shape{spec.head_dim},
                "attention layer {}: a q/k norm is an RMSNorm of [{}]", spec.layer, spec.head_dim);
  auto q_norm = make_cpu_norm(w, spec.q_norm ? &*spec.q_norm : nullptr);  // q first: errors name q's weight
  auto k_norm = make_cpu_norm(w, spec.k_norm ? &*spec.k_norm : nullptr);
  return std::make_unique<CpuCausalAttention>(spec, r->rotary(), std::move(q_norm), std::move(k_norm));
}

std::unique_ptr<Mlp> CpuLayers::mlp(const WeightSource& w, const MlpSpec& spec) {
  return std::make_unique<CpuMlp>(w, spec);
}

std::unique_ptr<SegmentAttention> CpuLayers::segment_attention(const SegmentAttentionSpec& spec) {
  return make_cpu_segment_attention(spec);
}

std::unique_ptr<VisionRopeTable> CpuLayers::vision_rope_table(const VisionRopeSpec& spec) {
  return make_cpu_vision_rope_table(spec);
}

std::unique_ptr<PatchEmbedding> CpuLayers::patch_embedding(const WeightSource& w, const PatchEmbeddingSpec& spec) {
  return make_cpu_patch_embedding(w, spec);
}

std::unique_ptr<RowOps> CpuLayers::row_ops() { return make_cpu_row_ops(); }
std::unique_ptr<PositionTable> CpuLayers::position_table(const WeightSource& w, const PositionTableSpec& spec) {
  return make_cpu_position_table(w, spec);
}

std::unique_ptr<LearnedRows> CpuLayers::learned_rows(const WeightSource& w, const WeightRef& table) {
  return make_cpu_learned_rows(w, table);
}

std::unique_ptr<Mlp> CpuLayers::moe(const WeightSource& w, const MoeSpec& spec) { return make_cpu_moe(w, spec); }

namespace {

// Tensor parallelism on the CPU: the Communicator's collectives over the step's f32 Acts.
class CpuCollective final : public Collective {
 public:
  explicit CpuCollective(Communicator& comm) : comm_(comm) {}
  void all_reduce_sum(Step& s, Act x) const override {
    (void)s;
    VLM_CHECK(x.dtype == DType::F32, "a CPU all-reduce of {}", dtype_name(x.dtype));
    comm_.all_reduce_sum(x.data, x.rows * x.cols, DType::F32, nullptr);
  }
  void gather_cols(Step& s, Act local, Act staging, Act out) const override {
    (void)s;
    const int64_t n = comm_.size(), R = local.rows, Vl = local.cols;
    VLM_CHECK(local.dtype == DType::F32 && out.rows == R && out.cols == n * Vl && staging.rows * staging.cols == R * n * Vl,
              "gather of [{}, {}] into [{}, {}]", R, Vl, out.rows, out.cols);
    if (R == 0) return;
    comm_.all_gather(local.data, staging.data, R * Vl, DType::F32, nullptr);  // [n][R, Vl]
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < R; ++i)
        std::memcpy(out.f32() + i * n * Vl + r * Vl, staging.f32() + (r * R + i) * Vl, static_cast<size_t>(Vl) * 4);
  }

 private:
  Communicator& comm_;
};

}  // namespace

std::unique_ptr<Collective> CpuLayers::collective(Communicator& comm) { return std::make_unique<CpuCollective>(comm); }

}  // namespace vlm
