// Restated from transformers 5.17 modeling_qwen2_vl.py / modeling_qwen2_5_vl.py (the blocks,
// rot_pos_emb and PatchMerger); no code taken.
#include "model/arch/qwen2_vision_tower.h"

#include <algorithm>
#include <cmath>

namespace vlm {

Qwen2VisionBlockSpec qwen2_vision_block_spec(const Qwen2VisionConfig& c, int64_t block) {
  const int64_t C = c.hidden_size, I = c.intermediate_size;
  const std::string p = "blocks." + std::to_string(block) + ".";
  const float eps = static_cast<float>(c.norm_eps);
  const NormKind kind = c.qwen25 ? NormKind::Rms : NormKind::Layer;
  auto norm = [&](const std::string& n) {
    return NormSpec{kind, eps, {p + n + ".weight", {C}}, c.qwen25 ? std::string() : p + n + ".bias"};
  };
  auto part = [&](const std::string& n, Shape shape) { return LinearPart{{p + n + ".weight", shape}, p + n + ".bias"}; };
  auto third = [&](int64_t i) {
    LinearPart q = part("attn.qkv", {3 * C, C});
    q.row_begin = i * C, q.row_end = (i + 1) * C;
    return q;
  };
  Qwen2VisionBlockSpec s{norm("norm1"), norm("norm2"), third(0), third(1), third(2), part("attn.proj", {C, C}), {}};
  if (c.qwen25)
    s.mlp = {MlpKind::GatedSilu, C, I, part("mlp.gate_proj", {I, C}), part("mlp.up_proj", {I, C}),
             part("mlp.down_proj", {C, I}), s.norm2};
  else
    s.mlp = {MlpKind::QuickGelu, C, I, {}, part("mlp.fc1", {I, C}), part("mlp.fc2", {C, I}), s.norm2};
  return s;
}

LinearPart qwen2_vision_patch_spec(const Qwen2VisionConfig& c) {
  return {{"patch_embed.proj.weight", {c.hidden_size, 3, c.temporal_patch_size, c.patch_size, c.patch_size}}, {}};
}

NormSpec qwen2_vision_merger_norm_spec(const Qwen2VisionConfig& c) {
  const int64_t C = c.hidden_size;
  return {c.qwen25 ? NormKind::Rms : NormKind::Layer, static_cast<float>(c.norm_eps), {"merger.ln_q.weight", {C}},
          c.qwen25 ? std::string() : "merger.ln_q.bias"};
}

MlpSpec qwen2_vision_merger_mlp_spec(const Qwen2VisionConfig& c) {
  const int64_t M = c.hidden_size * c.spatial_merge_size * c.spatial_merge_size;
  return {MlpKind::GeluErf, M, M, {}, {{"merger.mlp.0.weight", {M, M}}, "merger.mlp.0.bias"},
          {{"merger.mlp.2.weight", {c.out_hidden_size, M}}, "merger.mlp.2.bias"}};
}

Qwen2VisionTower::Qwen2VisionTower(const Qwen2VisionConfig& c, LayerBackend& b, const WeightSource& w) : config_(c) {
  patch_ = b.linear(w, {qwen2_vision_patch_spec(c)});
  rope_ = b.vision_rope_table({c.head_dim(), c.rope_theta});
  attn_ = b.segment_attention({c.num_heads, c.head_dim(), 1.0f / std::sqrt(static_cast<float>(c.head_dim()))});
  rows_ = b.row_ops();
  const auto& full = c.fullatt_block_indexes;
  for (int64_t l = 0; l < c.depth; ++l) {
    const Qwen2VisionBlockSpec s = qwen2_vision_block_spec(c, l);
    Block B;
    B.qkv = b.linear(w, {s.q, s.k, s.v}, &s.norm1);
    B.proj = b.linear(w, {s.proj});
    B.mlp = b.mlp(w, s.mlp);  // with norm2
    B.full = !c.qwen25 || std::find(full.begin(), full.end(), l) != full.end();
    blocks_.push_back(std::move(B));
  }
  merger_norm_ = b.norm(w, qwen2_vision_merger_norm_spec(c));
  merger_mlp_ = b.mlp(w, qwen2_vision_merger_mlp_spec(c));
}

ActivationPlan Qwen2VisionTower::plan(const Qwen2VisionLayout& lay) const {
  const Qwen2VisionConfig& c = config_;
  const int64_t P = lay.num_patches, U = P / (c.spatial_merge_size * c.spatial_merge_size), C = c.hidden_size;
  ActivationPlan p;
  p.bufs.resize(kNumBufs);
  p.bufs[kPatchRows] = {c.patch_dim(), ActRole::Hidden, false, P};  // pixel rows in the run order
  p.bufs[kX] = {C, ActRole::Residual, false, P};
  p.bufs[kH] = {C, ActRole::Hidden, false, P};
  p.bufs[kQkv] = {3 * C, ActRole::Hidden, false, P};
  p.bufs[kAttn] = {C, ActRole::Hidden, false, P};
  p.bufs[kInner] = {blocks_.empty() ? 1 : blocks_.front().mlp->inner_cols(), ActRole::Hidden, false, P};
  p.bufs[kMergerInner] = {merger_mlp_->inner_cols(), ActRole::Hidden, false, U};
  p.bufs[kMerged] = {c.out_hidden_size, ActRole::Residual, false, U};
  return p;
}

void Qwen2VisionTower::forward(Step& s, Act pixels, const Qwen2VisionLayout& lay, Act out) const {
  const int64_t unit = config_.spatial_merge_size * config_.spatial_merge_size;
  const int64_t U = lay.num_patches / unit;
  const Act pe = s.act(kPatchRows), x = s.act(kX), h = s.act(kH), qkv = s.act(kQkv), a = s.act(kAttn);
  const Act inner = s.act(kInner);
  const RopeRows rope = rope_->build(s, lay.pos_hw);  // [P] in the run order
  rows_->gather_units(s, pixels, lay.order, unit, pe);  // [P, K] pixel rows into the run order
  patch_->forward(s, pe, x, Accum::Write);              // [P, Cv]
  for (const Block& B : blocks_) {
    B.qkv->forward(s, x, qkv, Accum::Write);  // of norm1(x)
    attn_->forward(s, qkv, &rope, B.full ? lay.frame_cu : lay.window_cu, a);
    B.proj->forward(s, a, x, Accum::Add);
    B.mlp->forward(s, x, inner, x, Accum::Add);  // of norm2(x)
  }
  merger_norm_->forward(s, x, h);
  const Act merged = s.act(kMerged);  // [U, C] in the run order
  merger_mlp_->forward(s, reshaped(h, U, unit * h.cols), s.act(kMergerInner), merged, Accum::Write);
  rows_->scatter_units(s, merged, lay.order, 1, out);
}

}  // namespace vlm
