// Restated from transformers 5.17 modeling_qwen3_vl.py (Qwen3VLVisionModel: patch_embed,
// fast_pos_embed_interpolate, rot_pos_emb, the blocks, Qwen3VLVisionPatchMerger with and without
// use_postshuffle_norm); no code taken.
#include "model/arch/qwen3_vl_vision_tower.h"

#include <cmath>
#include <string>

#include "kernels/core/check.h"

namespace vlm {

Qwen3VLVisionBlockSpec qwen3_vl_vision_block_spec(const Qwen3VLVisionConfig& c, int64_t block) {
  const int64_t C = c.hidden_size, I = c.intermediate_size;
  const std::string p = "blocks." + std::to_string(block) + ".";
  const float eps = static_cast<float>(c.norm_eps);
  auto norm = [&](const std::string& n) { return NormSpec{NormKind::Layer, eps, {p + n + ".weight", {C}}, p + n + ".bias"}; };
  auto part = [&](const std::string& n, Shape shape) { return LinearPart{{p + n + ".weight", shape}, p + n + ".bias"}; };
  auto third = [&](int64_t i) {
    LinearPart q = part("attn.qkv", {3 * C, C});
    q.row_begin = i * C, q.row_end = (i + 1) * C;
    return q;
  };
  Qwen3VLVisionBlockSpec s{norm("norm1"), norm("norm2"), third(0), third(1), third(2), part("attn.proj", {C, C}), {}};
  s.mlp.kind = MlpKind::GeluTanh;
  s.mlp.hidden = C;
  s.mlp.inner = I;
  s.mlp.up = part("mlp.linear_fc1", {I, C});
  s.mlp.down = part("mlp.linear_fc2", {C, I});
  s.mlp.pre_norm = s.norm2;
  return s;
}

LinearPart qwen3_vl_vision_patch_spec(const Qwen3VLVisionConfig& c) {
  return {{"patch_embed.proj.weight", {c.hidden_size, 3, c.temporal_patch_size, c.patch_size, c.patch_size}},
          "patch_embed.proj.bias"};
}

PositionTableSpec qwen3_vl_vision_position_spec(const Qwen3VLVisionConfig& c) {
  return {{"pos_embed.weight", {c.num_position_embeddings, c.hidden_size}}, c.grid_side(), c.spatial_merge_size};
}

MlpSpec qwen3_vl_merger_mlp_spec(const Qwen3VLVisionConfig& c, int64_t k) {
  const int64_t M = c.hidden_size * c.spatial_merge_size * c.spatial_merge_size;
  const std::string p = k < 0 ? std::string("merger.") : "deepstack_merger_list." + std::to_string(k) + ".";
  MlpSpec s;
  s.kind = MlpKind::GeluErf;
  s.hidden = M;
  s.inner = M;
  s.up = {{p + "linear_fc1.weight", {M, M}}, p + "linear_fc1.bias"};
  s.down = {{p + "linear_fc2.weight", {c.out_hidden_size, M}}, p + "linear_fc2.bias"};
  if (k >= 0) s.pre_norm = NormSpec{NormKind::Layer, static_cast<float>(c.norm_eps), {p + "norm.weight", {M}}, p + "norm.bias"};
  return s;
}

NormSpec qwen3_vl_merger_norm_spec(const Qwen3VLVisionConfig& c) {
  return {NormKind::Layer, static_cast<float>(c.norm_eps), {"merger.norm.weight", {c.hidden_size}}, "merger.norm.bias"};
}

Qwen3VLVisionLayout qwen3_vl_vision_layout(const Qwen3VLVisionConfig& c, std::span<const std::array<int32_t, 3>> grids) {
  const int64_t ms = c.spatial_merge_size;
  Qwen3VLVisionLayout L;
  L.grids.assign(grids.begin(), grids.end());
  L.frame_cu = {0};
  for (const auto& g : grids) {
    VLM_CHECK(g[0] > 0 && g[1] > 0 && g[2] > 0 && g[1] % ms == 0 && g[2] % ms == 0, "vision grid {}x{}x{} (merge {})",
              g[0], g[1], g[2], ms);
    const int64_t hw = static_cast<int64_t>(g[1]) * g[2];
    for (int32_t t = 0; t < g[0]; ++t) L.frame_cu.push_back(L.frame_cu.back() + hw);
    // Row r of a frame: unit r / ms^2 (row-major over (h / ms) x (w / ms)), patch r % ms^2 in it.
    const int64_t uw = g[2] / ms;
    for (int32_t t = 0; t < g[0]; ++t)
      for (int64_t r = 0; r < hw; ++r) {
        const int64_t u = r / (ms * ms), m = r % (ms * ms);
        L.pos_hw.push_back(static_cast<int32_t>((u / uw) * ms + m / ms));
        L.pos_hw.push_back(static_cast<int32_t>((u % uw) * ms + m % ms));
      }
  }
  L.num_patches = L.frame_cu.back();
  VLM_CHECK(L.num_patches > 0, "no patches");
  return L;
}

Qwen3VLVisionTower::Qwen3VLVisionTower(const Qwen3VLVisionConfig& c, LayerBackend& b, const WeightSource& w)
    : config_(c) {
  patch_ = b.linear(w, {qwen3_vl_vision_patch_spec(c)});
  positions_ = b.position_table(w, qwen3_vl_vision_position_spec(c));
  rope_ = b.vision_rope_table({c.head_dim(), c.rope_theta});
  attn_ = b.segment_attention({c.num_heads, c.head_dim(), 1.0f / std::sqrt(static_cast<float>(c.head_dim()))});
  for (int64_t l = 0; l < c.depth; ++l) {
    const Qwen3VLVisionBlockSpec s = qwen3_vl_vision_block_spec(c, l);
    Block B;
    B.qkv = b.linear(w, {s.q, s.k, s.v}, &s.norm1);
    B.proj = b.linear(w, {s.proj});
    B.mlp = b.mlp(w, s.mlp);
    blocks_.push_back(std::move(B));
  }
  for (size_t k = 0; k < c.deepstack_visual_indexes.size(); ++k) {
    const int l = c.deepstack_visual_indexes[k];
    VLM_CHECK(l >= 0 && l < c.depth && blocks_[static_cast<size_t>(l)].deepstack < 0,
              "deepstack_visual_indexes entry {} of depth {}", l, c.depth);
    blocks_[static_cast<size_t>(l)].deepstack = static_cast<int>(k);
    deepstack_.push_back(b.mlp(w, qwen3_vl_merger_mlp_spec(c, static_cast<int64_t>(k))));
  }
  merger_norm_ = b.norm(w, qwen3_vl_merger_norm_spec(c));
  merger_mlp_ = b.mlp(w, qwen3_vl_merger_mlp_spec(c, -1));
}

ActivationPlan Qwen3VLVisionTower::plan(const Qwen3VLVisionLayout& lay) const {
  const Qwen3VLVisionConfig& c = config_;
  const int64_t P = lay.num_patches, U = P / (c.spatial_merge_size * c.spatial_merge_size), C = c.hidden_size;
  ActivationPlan p;
  p.bufs.resize(kNumBufs);
  p.bufs[kX] = {C, ActRole::Residual, false, P};
  p.bufs[kH] = {C, ActRole::Hidden, false, P};
  p.bufs[kQkv] = {3 * C, ActRole::Hidden, false, P};
  p.bufs[kAttn] = {C, ActRole::Hidden, false, P};
  p.bufs[kInner] = {blocks_.empty() ? 1 : blocks_.front().mlp->inner_cols(), ActRole::Hidden, false, P};
  p.bufs[kMergerInner] = {merger_mlp_->inner_cols(), ActRole::Hidden, false, U};
  return p;
}

void Qwen3VLVisionTower::forward(Step& s, Act pixels, const Qwen3VLVisionLayout& lay, Act out) const {
  const int64_t unit = config_.spatial_merge_size * config_.spatial_merge_size;
  const int64_t P = lay.num_patches, U = P / unit, M = unit * config_.hidden_size, C = config_.out_hidden_size;
  VLM_CHECK(pixels.rows == P && out.rows == (1 + static_cast<int64_t>(deepstack_.size())) * U && out.cols == C,
            "Qwen3-VL tower over [{}, {}] into [{}, {}] ({} patches, {} DeepStack planes)", pixels.rows, pixels.cols,
            out.rows, out.cols, P, deepstack_.size());
  const Act x = s.act(kX), h = s.act(kH), qkv = s.act(kQkv), a = s.act(kAttn), inner = s.act(kInner);
  const Act merger_inner = s.act(kMergerInner);
  const RopeRows rope = rope_->build(s, lay.pos_hw);
  patch_->forward(s, pixels, x, Accum::Write);  // conv + bias
  positions_->add(s, lay.grids, x);
  for (const Block& B : blocks_) {
    B.qkv->forward(s, x, qkv, Accum::Write);  // of norm1(x)
    attn_->forward(s, qkv, &rope, lay.frame_cu, a);
    B.proj->forward(s, a, x, Accum::Add);
    B.mlp->forward(s, x, inner, x, Accum::Add);  // of norm2(x)
    if (B.deepstack >= 0)  // norm over merge^2 Cv: the view first
      deepstack_[static_cast<size_t>(B.deepstack)]->forward(s, reshaped(x, U, M), merger_inner,
                                                            row_slice(out, (1 + B.deepstack) * U, U), Accum::Write);
  }
  merger_norm_->forward(s, x, h);
  merger_mlp_->forward(s, reshaped(h, U, M), merger_inner, row_slice(out, 0, U), Accum::Write);
}

}  // namespace vlm
