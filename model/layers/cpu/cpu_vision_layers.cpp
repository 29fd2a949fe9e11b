#include "model/layers/cpu/cpu_vision_layers.h"

#include <algorithm>
#include <cmath>

#include "kernels/attention/dense_attention.h"
#include "kernels/core/check.h"
#include "kernels/ops/rope.h"
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
};

}  // namespace

std::unique_ptr<SegmentAttention> make_cpu_segment_attention(const SegmentAttentionSpec& spec) {
  return std::make_unique<CpuSegmentAttention>(spec);
}
std::unique_ptr<VisionRopeTable> make_cpu_vision_rope_table(const VisionRopeSpec& spec) {
  return std::make_unique<CpuVisionRopeTable>(spec);
}
std::unique_ptr<RowOps> make_cpu_row_ops() { return std::make_unique<CpuRowOps>(); }

}  // namespace vlm
