// Restated from transformers 5.17 modeling_qwen2_vl.py / modeling_qwen2_5_vl.py (VisionRotaryEmbedding,
// rot_pos_emb, get_window_index, the blocks and PatchMerger); no code taken.
#include "model/vision/qwen2_vision.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "kernels/gemm/gemm.h"
#include "kernels/ops/ops.h"
#include "kernels/ops/vision_ops.h"
#include "model/arch/qwen2_vision_tower.h"
#include "model/layers/cpu/cpu_layers.h"
#include "model/layers/cpu/cpu_step.h"

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

Qwen2VisionEncoder::Qwen2VisionEncoder(const Qwen2VisionConfig& c, const WeightLookup& lookup, const std::string& p)
    : config_(c), source_(lookup, p) {
  const WeightSource& w = source_;
  layers_ = std::make_unique<CpuLayers>();
  tower_ = std::make_unique<Qwen2VisionTower>(c, *layers_, w);
  // The same tensors by role, for a copy on another device (names from the tower's specs).
  const LinearPart pe = qwen2_vision_patch_spec(c);
  const TensorView conv = w.get(pe.weight);
  patch_w_ = TensorView(conv.data, conv.dtype, {c.hidden_size, c.patch_dim()});
  auto opt = [&](const std::string& name, const Shape& shape) { return name.empty() ? TensorView() : f32(w.get(name, shape)); };
  auto bias = [&](const LinearPart& l) { return opt(l.bias, {l.weight.shape[0]}); };
  for (int64_t l = 0; l < c.depth; ++l) {
    const Qwen2VisionBlockSpec s = qwen2_vision_block_spec(c, l);
    Block B;
    B.norm1_w = f32(w.get(s.norm1.weight));
    B.norm2_w = f32(w.get(s.norm2.weight));
    B.norm1_b = opt(s.norm1.bias, s.norm1.weight.shape);
    B.norm2_b = opt(s.norm2.bias, s.norm2.weight.shape);
    B.qkv = w.get(s.q.weight);  // the fused [3Cv, Cv] tensor the three parts slice
    B.qkv_b = bias(s.q);
    B.proj = w.get(s.proj.weight);
    B.proj_b = bias(s.proj);
    const MlpSpec& m = s.mlp;
    if (c.qwen25) {
      B.gate = w.get(m.gate.weight), B.gate_b = bias(m.gate);
      B.up = w.get(m.up.weight), B.up_b = bias(m.up);
      B.down = w.get(m.down.weight), B.down_b = bias(m.down);
    } else {
      B.fc1 = w.get(m.up.weight), B.fc1_b = bias(m.up);
      B.fc2 = w.get(m.down.weight), B.fc2_b = bias(m.down);
    }
    blocks_.push_back(B);
  }
  const NormSpec mn = qwen2_vision_merger_norm_spec(c);
  const MlpSpec mm = qwen2_vision_merger_mlp_spec(c);
  merge_norm_w_ = f32(w.get(mn.weight));
  merge_norm_b_ = opt(mn.bias, mn.weight.shape);
  mlp0_ = w.get(mm.up.weight), mlp0_b_ = bias(mm.up);
  mlp2_ = w.get(mm.down.weight), mlp2_b_ = bias(mm.down);
  // VisionRotaryEmbedding(head_dim / 2): the default inverse frequencies over D/2 dims.
  RopeConfig half = vision_rope_config(c);
  half.head_dim = half.rotary_dim = static_cast<int>(c.head_dim() / 2);
  inv_freq_ = RotaryEmbedding(half).inv_freq();
}

Qwen2VisionEncoder::~Qwen2VisionEncoder() = default;

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
  const Qwen2VisionLayout lay = layout(grids);
  const ActivationPlan plan = tower_->plan(lay);
  CpuStep step(plan, lay.num_patches);
  const int64_t U = lay.num_patches / (config_.spatial_merge_size * config_.spatial_merge_size);
  tower_->forward(step, Act{const_cast<float*>(pixels), lay.num_patches, config_.patch_dim(), DType::F32}, lay,
                  Act{out, U, config_.out_hidden_size, DType::F32});
}

}  // namespace vlm
