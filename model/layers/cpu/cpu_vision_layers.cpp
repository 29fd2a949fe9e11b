#include "model/layers/cpu/cpu_vision_layers.h"

#include <algorithm>
#include <cmath>

#include "kernels/attention/dense_attention.h"
#include "kernels/core/check.h"
#include "kernels/ops/rope.h"
#include "kernels/ops/vision_ops.h"
#include "model/layers/cpu/cpu_linear.h"
#include "model/layers/cpu/cpu_step.h"

namespace vlm {
namespace {

RopeConfig rope_config(int64_t head_dim, double theta) {
  RopeConfig r;
  r.head_dim = static_cast<int>(head_dim);
  r.rotary_dim = r.head_dim;
  r.theta = theta;
  return r;
}

// The q|k|v input as planes [T, H*D] each (CpuLinear of three parts writes them so).
class CpuSegmentAttention final : public SegmentAttention {
 public:
  explicit CpuSegmentAttention(const SegmentAttentionSpec& spec)
      : spec_(spec), rotate_(rope_config(spec.head_dim, 10000.0)) {}  // apply_cached reads only the table

  void forward(Step&, Act qkv, const RopeRows* rope, std::span<const int64_t> cu, Act out) const override {
    const int64_t T = qkv.rows, HD = spec_.num_heads * spec_.head_dim;
    const int H = static_cast<int>(spec_.num_heads), D = static_cast<int>(spec_.head_dim);
    VLM_CHECK(qkv.cols == 3 * HD && !cu.empty() && cu.front() == 0 && cu.back() == T,
              "segment attention over [{}, {}] with segments ending at {}", T, qkv.cols, cu.empty() ? -1 : cu.back());
    float* q = qkv.f32();
    float* k = q + T * HD;
    float* v = k + T * HD;
    if (rope != nullptr) rotate_.apply_cached(q, H, k, H, static_cast<const float*>(rope->table), T);
    const int64_t n = static_cast<int64_t>(cu.size()) - 1, len = cu[1] - cu[0];
    bool equal = true;
    for (int64_t s = 0; s < n; ++s) equal = equal && cu[s + 1] - cu[s] == len;
    if (equal) {  // every segment the same length (images of one tower): one call over all
      dense_attention(q, k, v, n, len, H, D, spec_.scale, out.f32());
      return;
    }
    for (int64_t s = 0; s < n; ++s) {
      const int64_t off = cu[s] * HD;
      dense_attention(q + off, k + off, v + off, 1, cu[s + 1] - cu[s], H, D, spec_.scale, out.f32() + off);
    }
  }

 private:
  SegmentAttentionSpec spec_;
  RotaryEmbedding rotate_;
};

// Table [T, D]: cos of D/2 angles, then their sin; angle i = (i < D/4 ? row : column) * f(i % D/4),
// f the default inverse frequencies over D/2 dims.
class CpuVisionRopeTable final : public VisionRopeTable {
 public:
  explicit CpuVisionRopeTable(const VisionRopeSpec& spec)
      : D_(spec.head_dim), inv_freq_(RotaryEmbedding(rope_config(spec.head_dim / 2, spec.theta)).inv_freq()) {}

  RopeRows build(Step& st, std::span<const int32_t> pos_hw) const override {
    const int64_t T = static_cast<int64_t>(pos_hw.size()) / 2, q4 = D_ / 4, half = D_ / 2;
    float* table = CpuStep::of(st).scratch(CpuStep::kRopeTable, T * D_);
    for (int64_t row = 0; row < T; ++row) {
      const float hp = static_cast<float>(pos_hw[static_cast<size_t>(2 * row)]);
      const float wp = static_cast<float>(pos_hw[static_cast<size_t>(2 * row + 1)]);
      float* cs = table + row * D_;
      for (int64_t i = 0; i < half; ++i) {
        const float angle = (i < q4 ? hp : wp) * inv_freq_[static_cast<size_t>(i % q4)];
        cs[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
        cs[half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
      }
    }
    return RopeRows{table, D_};
  }

 private:
  int64_t D_;
  std::vector<float> inv_freq_;  // [D / 4]
};

// Unfold (row (n, gy, gx) holds [ch, ky, kx], the conv weight's layout), the conv as a linear
// layer with its bias, then class token and positions: the pre-layer CLIP encoder's loops.
class CpuPatchEmbedding final : public PatchEmbedding {
 public:
  CpuPatchEmbedding(const WeightSource& w, const PatchEmbeddingSpec& spec)
      : spec_(spec), conv_(load_linear_parts(w, {spec.conv})) {
    C_ = conv_.out_features();
    VLM_CHECK(spec.patch_size > 0 && spec.image_size >= spec.patch_size, "image size {} over patches of {}",
              spec.image_size, spec.patch_size);  // the last image_size % patch_size pixels fall outside every patch
    G_ = spec.image_size / spec.patch_size;
    const int64_t L = tokens_per_image();
    VLM_CHECK(spec.positions.shape == Shape({L, C_}), "positions {} are not [{}, {}]", spec.positions.name, L, C_);
    if (!spec.class_embedding.empty()) class_ = f32_copy(w.get(spec.class_embedding, {C_}));
    pos_ = f32_copy(w.get(spec.positions));
  }
  int64_t tokens_per_image() const override { return G_ * G_ + (spec_.class_embedding.empty() ? 0 : 1); }

  void forward(Step& st, Act pixels, Act x) const override {
    CpuStep& s = CpuStep::of(st);
    const int64_t p = spec_.patch_size, S = spec_.image_size, ch = spec_.channels, K = ch * p * p;
    const int64_t N = pixels.rows, P = G_ * G_, L = tokens_per_image(), C = C_, cls = L - P;
    VLM_CHECK(pixels.cols == ch * S * S && x.rows == N * L && x.cols == C, "patch embedding of [{}, {}] into [{}, {}]",
              pixels.rows, pixels.cols, x.rows, x.cols);
    float* pp = s.scratch(CpuStep::kPatches, N * P * K);  // [N*P, K]
    const float* px = pixels.f32();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t gy = 0; gy < G_; ++gy)
        for (int64_t gx = 0; gx < G_; ++gx) {
          float* row = pp + ((n * G_ + gy) * G_ + gx) * K;
          for (int64_t c = 0; c < ch; ++c)
            for (int64_t ky = 0; ky < p; ++ky) {
              const float* src = px + ((n * ch + c) * S + gy * p + ky) * S + gx * p;
              std::copy(src, src + p, row + (c * p + ky) * p);
            }
        }
    float* pe = s.scratch(CpuStep::kPatchOut, N * P * C);  // [N*P, C], conv + bias
    conv_.forward(st, Act{pp, N * P, K, DType::F32}, Act{pe, N * P, C, DType::F32}, Accum::Write);
    const float* cl = class_.data() ? class_.as<float>() : nullptr;
    const float* pos = pos_.as<float>();
    float* xp = x.f32();
    for (int64_t n = 0; n < N; ++n) {
      if (cls)
        for (int64_t i = 0; i < C; ++i) xp[n * L * C + i] = cl[i] + pos[i];
      for (int64_t t = cls; t < L; ++t)
        for (int64_t i = 0; i < C; ++i) xp[(n * L + t) * C + i] = pe[(n * P + t - cls) * C + i] + pos[t * C + i];
    }
  }

 private:
  static Tensor f32_copy(const TensorView& t) {
    Tensor f = Tensor::empty(t.shape, DType::F32);
    convert_to_f32(t.data, t.dtype, f.as<float>(), t.numel());
    return f;
  }
  PatchEmbeddingSpec spec_;
  CpuLinear conv_;     // [C, channels*p*p]
  int64_t C_ = 0, G_ = 0;
  Tensor class_, pos_;  // [C] f32 (or empty), [L, C] f32
};

class CpuRowOps final : public RowOps {
 public:
  void gather_units(Step&, Act src, std::span<const int64_t> order, int64_t unit, Act dst) const override {
    const int64_t n = unit * src.cols;
    for (size_t j = 0; j < order.size(); ++j)
      std::copy(src.f32() + order[j] * n, src.f32() + (order[j] + 1) * n, dst.f32() + static_cast<int64_t>(j) * n);
  }
  void scatter_units(Step&, Act src, std::span<const int64_t> order, int64_t unit, Act dst) const override {
    const int64_t n = unit * src.cols;
    for (size_t j = 0; j < order.size(); ++j)
      std::copy(src.f32() + static_cast<int64_t>(j) * n, src.f32() + static_cast<int64_t>(j + 1) * n,
                dst.f32() + order[j] * n);
  }
  void gather_rows(Step&, Act src, std::span<const int64_t> rows, Act dst, int64_t col) const override {
    const int64_t C = src.cols;
    VLM_CHECK(static_cast<int64_t>(rows.size()) == dst.rows && col >= 0 && col + C <= dst.cols,
              "{} rows of {} into columns [{}, {}) of [{}, {}]", rows.size(), C, col, col + C, dst.rows, dst.cols);
    for (size_t r = 0; r < rows.size(); ++r) {
      VLM_CHECK(rows[r] >= 0 && rows[r] < src.rows, "row {} of {}", rows[r], src.rows);
      std::copy(src.f32() + rows[r] * C, src.f32() + (rows[r] + 1) * C, dst.f32() + static_cast<int64_t>(r) * dst.cols + col);
    }
  }
  void copy_rows(Step&, Act src, std::span<const int64_t> src_rows, Act dst,
                 std::span<const int64_t> dst_rows) const override {
    const int64_t C = src.cols;
    VLM_CHECK(src_rows.size() == dst_rows.size() && dst.cols == C, "{} rows of {} into {} rows of {}", src_rows.size(),
              C, dst_rows.size(), dst.cols);
    for (size_t j = 0; j < src_rows.size(); ++j) {
      VLM_CHECK(src_rows[j] >= 0 && src_rows[j] < src.rows && dst_rows[j] >= 0 && dst_rows[j] < dst.rows,
                "row {} of {} to row {} of {}", src_rows[j], src.rows, dst_rows[j], dst.rows);
      std::copy(src.f32() + src_rows[j] * C, src.f32() + (src_rows[j] + 1) * C, dst.f32() + dst_rows[j] * C);
    }
  }
  void add_override_plane(Step& st, int64_t plane, Act x) const override {
    CpuStep& s = CpuStep::of(st);
    const EmbeddingOverride& o = s.override();
    if (o.use == nullptr) return;  // no media rows this step
    VLM_CHECK(o.embeds != nullptr && plane >= 1 && plane < o.num_planes, "override plane {} of {}", plane,
              o.num_planes);
    const int64_t C = x.cols, stride = o.num_planes * C;
    for (int64_t t = 0; t < x.rows; ++t) {
      if (!o.use[t]) continue;
      const float* src = o.embeds + t * stride + plane * C;
      float* dst = x.f32() + t * C;
      for (int64_t c = 0; c < C; ++c) dst[c] += src[c];
    }
  }
  void bilinear(Step&, Act src, int64_t h, int64_t w, int64_t oh, int64_t ow, Act dst) const override {
    VLM_CHECK(src.rows == h * w && dst.rows == oh * ow && src.cols == dst.cols, "bilinear [{}, {}] as {}x{} into [{}, {}] as {}x{}",
              src.rows, src.cols, h, w, dst.rows, dst.cols, oh, ow);
    bilinear_resize(src.f32(), h, w, src.cols, oh, ow, dst.f32());
  }
};

class CpuLearnedRows final : public LearnedRows {
 public:
  CpuLearnedRows(const WeightSource& w, const WeightRef& table) {
    const TensorView t = w.get(table);
    rows_ = t.ndim() == 1 ? 1 : t.dim(0);
    cols_ = t.numel() / rows_;
    table_.resize(static_cast<size_t>(t.numel()));
    convert_to_f32(t.data, t.dtype, table_.data(), t.numel());
  }
  void write(Step&, int64_t index, std::span<const int64_t> rows, Act dst) const override {
    VLM_CHECK(index >= 0 && index < rows_ && dst.cols == cols_, "learned row {} of {} into [{}, {}]", index, rows_,
              dst.rows, dst.cols);
    const float* src = table_.data() + index * cols_;
    for (int64_t r : rows) {
      VLM_CHECK(r >= 0 && r < dst.rows, "row {} of {}", r, dst.rows);
      std::copy(src, src + cols_, dst.f32() + r * cols_);
    }
  }

 private:
  std::vector<float> table_;  // [rows, cols] f32
  int64_t rows_ = 0, cols_ = 0;
};

}  // namespace

std::unique_ptr<SegmentAttention> make_cpu_segment_attention(const SegmentAttentionSpec& spec) {
  return std::make_unique<CpuSegmentAttention>(spec);
}
std::unique_ptr<VisionRopeTable> make_cpu_vision_rope_table(const VisionRopeSpec& spec) {
  return std::make_unique<CpuVisionRopeTable>(spec);
}
std::unique_ptr<RowOps> make_cpu_row_ops() { return std::make_unique<CpuRowOps>(); }
std::unique_ptr<LearnedRows> make_cpu_learned_rows(const WeightSource& w, const WeightRef& table) {
  return std::make_unique<CpuLearnedRows>(w, table);
}
std::unique_ptr<PatchEmbedding> make_cpu_patch_embedding(const WeightSource& w, const PatchEmbeddingSpec& spec) {
  return std::make_unique<CpuPatchEmbedding>(w, spec);
}

}  // namespace vlm
