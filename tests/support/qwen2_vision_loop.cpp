#include "tests/support/qwen2_vision_loop.h"

#include <algorithm>
#include <cmath>

#include "kernels/attention/dense_attention.h"
#include "kernels/core/check.h"
#include "kernels/gemm/gemm.h"
#include "kernels/ops/ops.h"
#include "kernels/ops/vision_ops.h"

namespace vlm::testing {

void qwen2_vision_loop(const Qwen2VisionEncoder& e, const float* pixels, std::span<const std::array<int32_t, 3>> grids,
                       float* out) {
  const Qwen2VisionConfig& c = e.config();
  RopeConfig rc;
  rc.head_dim = rc.rotary_dim = static_cast<int>(c.head_dim());
  rc.theta = c.rope_theta;
  const RotaryEmbedding rope_(rc);
  const std::vector<float>& inv_freq_ = e.inv_freq();
  const TensorView& patch_w_ = e.patch_weight();
  const Qwen2VisionEncoder::Merger mg = e.merger();
  auto norm = [&](const float* x, const TensorView& w, const TensorView& b, int64_t T, float* y) {
    const float eps = static_cast<float>(c.norm_eps);
    if (c.qwen25) rms_norm(x, w, eps, T, y);
    else layer_norm(x, w, b, eps, T, y);
  };
  const int64_t C = c.hidden_size, I = c.intermediate_size, D = c.head_dim();
  const int64_t ms = c.spatial_merge_size, unit = ms * ms, M = C * unit;
  const int H = static_cast<int>(c.num_heads);
  const Qwen2VisionLayout lay = e.layout(grids);
  const int64_t P = lay.num_patches, U = P / unit;
  const std::vector<int64_t>& order = lay.order;

  // Rotary table per patch in the run order: [P, D] (cos D/2, sin D/2).
  const int64_t q4 = D / 4, half = D / 2;
  std::vector<float> rope_table(static_cast<size_t>(P * D));
  for (int64_t row = 0; row < P; ++row) {
    const float hp = static_cast<float>(lay.pos_hw[static_cast<size_t>(2 * row)]);
    const float wp = static_cast<float>(lay.pos_hw[static_cast<size_t>(2 * row + 1)]);
    float* cs = rope_table.data() + row * D;
    for (int64_t i = 0; i < half; ++i) {
      const float angle = (i < q4 ? hp : wp) * inv_freq_[static_cast<size_t>(i % q4)];
      cs[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      cs[half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }

  // Patch embedding, then rows into the unit order.
  Tensor pe = Tensor::empty({P, C});
  linear(pixels, P, patch_w_, nullptr, pe.as<float>());
  Tensor x = Tensor::empty({P, C});
  float* xp = x.as<float>();
  for (int64_t j = 0; j < U; ++j) {
    const int64_t src = order[static_cast<size_t>(j)];
    std::copy(pe.as<float>() + src * unit * C, pe.as<float>() + (src + 1) * unit * C, xp + j * unit * C);
  }

  Tensor h = Tensor::empty({P, C}), qkv = Tensor::empty({P, 3 * C}), q = Tensor::empty({P, C});
  Tensor k = Tensor::empty({P, C}), v = Tensor::empty({P, C}), attn = Tensor::empty({P, C});
  Tensor f1 = Tensor::empty({P, I}), f2 = Tensor::empty({P, I});
  float* hp = h.as<float>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int64_t l = 0; l < c.depth; ++l) {
    const Qwen2VisionEncoder::Block& B = e.blocks()[static_cast<size_t>(l)];
    const std::vector<int64_t>& cu = e.full_attention(l) ? lay.frame_cu : lay.window_cu;
    norm(xp, B.norm1_w, B.norm1_b, P, hp);
    linear(hp, P, B.qkv, B.qkv_b.as<const float>(), qkv.as<float>());
    for (int64_t t = 0; t < P; ++t) {
      const float* r = qkv.as<float>() + t * 3 * C;
      std::copy(r, r + C, q.as<float>() + t * C);
      std::copy(r + C, r + 2 * C, k.as<float>() + t * C);
      std::copy(r + 2 * C, r + 3 * C, v.as<float>() + t * C);
    }
    rope_.apply_cached(q.as<float>(), H, k.as<float>(), H, rope_table.data(), P);
    for (size_t s = 0; s + 1 < cu.size(); ++s) {
      const int64_t off = cu[s] * C, len = cu[s + 1] - cu[s];
      dense_attention(q.as<float>() + off, k.as<float>() + off, v.as<float>() + off, 1, len, H,
                      static_cast<int>(D), scale, attn.as<float>() + off);
    }
    linear(attn.as<float>(), P, B.proj, B.proj_b.as<const float>(), hp);
    add_inplace(xp, hp, P * C);
    norm(xp, B.norm2_w, B.norm2_b, P, hp);
    if (c.qwen25) {
      linear(hp, P, B.gate, B.gate_b.as<const float>(), f1.as<float>());
      linear(hp, P, B.up, B.up_b.as<const float>(), f2.as<float>());
      silu_mul(f1.as<float>(), f2.as<float>(), P, I, f1.as<float>());
      linear(f1.as<float>(), P, B.down, B.down_b.as<const float>(), hp);
    } else {
      linear(hp, P, B.fc1, B.fc1_b.as<const float>(), f1.as<float>());
      quick_gelu(f1.as<float>(), P * I);
      linear(f1.as<float>(), P, B.fc2, B.fc2_b.as<const float>(), hp);
    }
    add_inplace(xp, hp, P * C);
  }

  // Merger over units [U, unit * Cv], then back to the original unit order.
  norm(xp, mg.norm_w, mg.norm_b, P, hp);
  Tensor m1 = Tensor::empty({U, M}), m2 = Tensor::empty({U, c.out_hidden_size});
  linear(hp, U, mg.mlp0, mg.mlp0_b.as<const float>(), m1.as<float>());
  gelu_erf(m1.as<float>(), U * M);
  linear(m1.as<float>(), U, mg.mlp2, mg.mlp2_b.as<const float>(), m2.as<float>());
  const int64_t Co = c.out_hidden_size;
  for (int64_t j = 0; j < U; ++j)
    std::copy(m2.as<float>() + j * Co, m2.as<float>() + (j + 1) * Co, out + order[static_cast<size_t>(j)] * Co);
}

}  // namespace vlm::testing
