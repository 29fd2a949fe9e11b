// Restated from transformers 5.17 modeling_qwen2_vl.py / modeling_qwen2_5_vl.py (VisionRotaryEmbedding,
// rot_pos_emb, get_window_index, the blocks and PatchMerger); no code taken.
#include "model/vision/qwen2_vision.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "kernels/attention/dense_attention.h"
#include "kernels/core/check.h"
#include "kernels/gemm/gemm.h"
#include "kernels/ops/ops.h"
#include "kernels/ops/vision_ops.h"

namespace vlm {

Qwen2VisionConfig Qwen2VisionConfig::from_json(const nlohmann::json& j, bool qwen25, const std::string& source) {
  auto fail = [&](const std::string& what) { return LoadError(source + ": vision_config: " + what); };
  Qwen2VisionConfig c;
  c.qwen25 = qwen25;
  auto num = [&](const char* key, auto& dst) {
    if (j.contains(key) && j[key].is_number()) dst = static_cast<std::remove_reference_t<decltype(dst)>>(j[key].get<double>());
  };
  num("depth", c.depth);
  num("num_heads", c.num_heads);
  num("patch_size", c.patch_size);
  num("temporal_patch_size", c.temporal_patch_size);
  num("spatial_merge_size", c.spatial_merge_size);
  const std::string act = j.value("hidden_act", std::string(qwen25 ? "silu" : "quick_gelu"));
  if (qwen25) {
    num("hidden_size", c.hidden_size);
    num("intermediate_size", c.intermediate_size);
    num("out_hidden_size", c.out_hidden_size);
    num("window_size", c.window_size);
    num("tokens_per_second", c.tokens_per_second);
    if (j.contains("fullatt_block_indexes")) c.fullatt_block_indexes = j["fullatt_block_indexes"].get<std::vector<int>>();
    if (act != "silu") throw fail("unsupported hidden_act '" + act + "' (supported: silu)");
  } else {
    num("embed_dim", c.hidden_size);
    num("hidden_size", c.out_hidden_size);
    double ratio = 4;
    num("mlp_ratio", ratio);
    c.intermediate_size = static_cast<int64_t>(static_cast<double>(c.hidden_size) * ratio);
    if (act != "quick_gelu") throw fail("unsupported hidden_act '" + act + "' (supported: quick_gelu)");
  }
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object())
    c.rope_theta = j["rope_parameters"].value("rope_theta", 10000.0);
  if (c.num_heads <= 0 || c.hidden_size % c.num_heads != 0 || c.head_dim() % 4 != 0)
    throw fail("hidden size must split into heads of a multiple of 4 dims");
  if (c.spatial_merge_size <= 0 || c.patch_size <= 0 || c.temporal_patch_size <= 0) throw fail("invalid patch sizes");
  if (qwen25 && c.window_size % (c.patch_size * c.spatial_merge_size) != 0)
    throw fail("window_size must be a multiple of patch_size * spatial_merge_size");
  return c;
}

TensorView Qwen2VisionEncoder::f32(const TensorView& t) {
  Tensor f = Tensor::empty(t.shape, DType::F32);
  convert_to_f32(t.data, t.dtype, f.as<float>(), t.numel());
  TensorView v = f.view();
  storage_.push_back(std::move(f));
  return v;
}

namespace {
RopeConfig vision_rope_config(const Qwen2VisionConfig& c) {
  RopeConfig r;
  r.head_dim = static_cast<int>(c.head_dim());
  r.rotary_dim = r.head_dim;
  r.theta = c.rope_theta;
  return r;
}
}  // namespace

Qwen2VisionEncoder::Qwen2VisionEncoder(const Qwen2VisionConfig& c, const WeightLookup& w, const std::string& p)
    : config_(c), rope_(vision_rope_config(c)) {
  const int64_t C = c.hidden_size, I = c.intermediate_size, K = c.patch_dim();
  const int64_t M = C * c.spatial_merge_size * c.spatial_merge_size;
  TensorView conv = w(p + "patch_embed.proj.weight",
                      {C, 3, c.temporal_patch_size, c.patch_size, c.patch_size});
  patch_w_ = TensorView(conv.data, conv.dtype, {C, K});
  for (int64_t l = 0; l < c.depth; ++l) {
    const std::string b = p + "blocks." + std::to_string(l) + ".";
    Block B;
    B.norm1_w = f32(w(b + "norm1.weight", {C}));
    B.norm2_w = f32(w(b + "norm2.weight", {C}));
    if (!c.qwen25) {
      B.norm1_b = f32(w(b + "norm1.bias", {C}));
      B.norm2_b = f32(w(b + "norm2.bias", {C}));
    }
    B.qkv = w(b + "attn.qkv.weight", {3 * C, C});
    B.qkv_b = f32(w(b + "attn.qkv.bias", {3 * C}));
    B.proj = w(b + "attn.proj.weight", {C, C});
    B.proj_b = f32(w(b + "attn.proj.bias", {C}));
    if (c.qwen25) {
      B.gate = w(b + "mlp.gate_proj.weight", {I, C});
      B.gate_b = f32(w(b + "mlp.gate_proj.bias", {I}));
      B.up = w(b + "mlp.up_proj.weight", {I, C});
      B.up_b = f32(w(b + "mlp.up_proj.bias", {I}));
      B.down = w(b + "mlp.down_proj.weight", {C, I});
      B.down_b = f32(w(b + "mlp.down_proj.bias", {C}));
    } else {
      B.fc1 = w(b + "mlp.fc1.weight", {I, C});
      B.fc1_b = f32(w(b + "mlp.fc1.bias", {I}));
      B.fc2 = w(b + "mlp.fc2.weight", {C, I});
      B.fc2_b = f32(w(b + "mlp.fc2.bias", {C}));
    }
    blocks_.push_back(B);
  }
  merge_norm_w_ = f32(w(p + "merger.ln_q.weight", {C}));
  if (!c.qwen25) merge_norm_b_ = f32(w(p + "merger.ln_q.bias", {C}));
  mlp0_ = w(p + "merger.mlp.0.weight", {M, M});
  mlp0_b_ = f32(w(p + "merger.mlp.0.bias", {M}));
  mlp2_ = w(p + "merger.mlp.2.weight", {c.out_hidden_size, M});
  mlp2_b_ = f32(w(p + "merger.mlp.2.bias", {c.out_hidden_size}));
  // VisionRotaryEmbedding(head_dim / 2): the default inverse frequencies over D/2 dims.
  RopeConfig half = vision_rope_config(c);
  half.head_dim = half.rotary_dim = static_cast<int>(c.head_dim() / 2);
  inv_freq_ = RotaryEmbedding(half).inv_freq();
}

void Qwen2VisionEncoder::norm(const float* x, const TensorView& w, const TensorView& b, int64_t T, float* y) const {
  const float eps = static_cast<float>(config_.norm_eps);
  if (config_.qwen25) rms_norm(x, w, eps, T, y);
  else layer_norm(x, w, b, eps, T, y);
}

bool Qwen2VisionEncoder::full_attention(int64_t l) const {
  const auto& f = config_.fullatt_block_indexes;
  return !config_.qwen25 || std::find(f.begin(), f.end(), l) != f.end();
}

Qwen2VisionLayout Qwen2VisionEncoder::layout(std::span<const std::array<int32_t, 3>> grids) const {
  const Qwen2VisionConfig& c = config_;
  const int64_t ms = c.spatial_merge_size, unit = ms * ms;
  Qwen2VisionLayout L;
  for (const auto& g : grids) {
    VLM_CHECK(g[0] > 0 && g[1] % ms == 0 && g[2] % ms == 0, "vision grid {}x{}x{} (merge {})", g[0], g[1], g[2], ms);
    L.num_patches += static_cast<int64_t>(g[0]) * g[1] * g[2];
  }
  VLM_CHECK(L.num_patches > 0, "no patches");
  const int64_t U = L.num_patches / unit;
  L.order.resize(static_cast<size_t>(U));
  L.frame_cu = {0};
  L.window_cu = {0};
  std::vector<std::pair<int32_t, int32_t>> unit_yx(static_cast<size_t>(U));  // merged row, column per prompt unit
  int64_t base = 0, j = 0;
  const int64_t vm = c.qwen25 ? c.window_size / ms / c.patch_size : 0;
  for (const auto& g : grids) {
    const int64_t lh = g[1] / ms, lw = g[2] / ms;
    for (int64_t t = 0; t < g[0]; ++t) {
      L.frame_cu.push_back(L.frame_cu.back() + lh * lw * unit);
      for (int64_t i = 0; i < lh * lw; ++i)
        unit_yx[static_cast<size_t>(base + t * lh * lw + i)] = {static_cast<int32_t>(i / lw), static_cast<int32_t>(i % lw)};
      if (!c.qwen25) {
        for (int64_t i = 0; i < lh * lw; ++i) L.order[static_cast<size_t>(j++)] = base + t * lh * lw + i;
        continue;
      }
      const int64_t nwh = (lh + vm - lh % vm) / vm, nww = (lw + vm - lw % vm) / vm;  // HF pads a full vm
      for (int64_t wy = 0; wy < nwh; ++wy)
        for (int64_t wx = 0; wx < nww; ++wx) {
          int64_t n = 0;
          for (int64_t y = wy * vm; y < std::min(lh, wy * vm + vm); ++y)
            for (int64_t x = wx * vm; x < std::min(lw, wx * vm + vm); ++x, ++n)
              L.order[static_cast<size_t>(j++)] = base + t * lh * lw + y * lw + x;
          if (n > 0) L.window_cu.push_back(L.window_cu.back() + n * unit);
        }
    }
    base += static_cast<int64_t>(g[0]) * lh * lw;
  }
  // Patch (my, mx) of merged unit (by, bx) sits at row by * ms + my, column bx * ms + mx.
  L.pos_hw.resize(static_cast<size_t>(2 * L.num_patches));
  for (int64_t u = 0; u < U; ++u) {
    const auto [by, bx] = unit_yx[static_cast<size_t>(L.order[static_cast<size_t>(u)])];
    for (int64_t m = 0; m < unit; ++m) {
      L.pos_hw[static_cast<size_t>(2 * (u * unit + m))] = static_cast<int32_t>(by * ms + m / ms);
      L.pos_hw[static_cast<size_t>(2 * (u * unit + m) + 1)] = static_cast<int32_t>(bx * ms + m % ms);
    }
  }
  return L;
}

void Qwen2VisionEncoder::encode(const float* pixels, std::span<const std::array<int32_t, 3>> grids, float* out) const {
  const Qwen2VisionConfig& c = config_;
  const int64_t C = c.hidden_size, I = c.intermediate_size, D = c.head_dim();
  const int64_t ms = c.spatial_merge_size, unit = ms * ms, M = C * unit;
  const int H = static_cast<int>(c.num_heads);
  const Qwen2VisionLayout lay = layout(grids);
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
    const Block& B = blocks_[static_cast<size_t>(l)];
    const std::vector<int64_t>& cu = full_attention(l) ? lay.frame_cu : lay.window_cu;
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
  norm(xp, merge_norm_w_, merge_norm_b_, P, hp);
  Tensor m1 = Tensor::empty({U, M}), m2 = Tensor::empty({U, c.out_hidden_size});
  linear(hp, U, mlp0_, mlp0_b_.as<const float>(), m1.as<float>());
  gelu_erf(m1.as<float>(), U * M);
  linear(m1.as<float>(), U, mlp2_, mlp2_b_.as<const float>(), m2.as<float>());
  const int64_t Co = c.out_hidden_size;
  for (int64_t j = 0; j < U; ++j)
    std::copy(m2.as<float>() + j * Co, m2.as<float>() + (j + 1) * Co, out + order[static_cast<size_t>(j)] * Co);
}

}  // namespace vlm
