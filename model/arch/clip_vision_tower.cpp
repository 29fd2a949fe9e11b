// Restated from transformers 5.17 modeling_clip.py / modeling_siglip.py (CLIPVisionEmbeddings,
// SiglipVisionEmbeddings, the encoder layers); no code taken.
#include "model/arch/clip_vision_tower.h"

#include <algorithm>
#include <cmath>

#include "kernels/core/check.h"

namespace vlm {
namespace {

MlpKind mlp_kind(VisionActivation a) {
  switch (a) {
    case VisionActivation::QuickGelu: return MlpKind::QuickGelu;
    case VisionActivation::GeluTanh: return MlpKind::GeluTanh;
    case VisionActivation::Gelu: break;
  }
  return MlpKind::GeluErf;
}

}  // namespace

ClipVisionLayerSpec clip_vision_layer_spec(const ClipVisionConfig& c, int64_t layer) {
  const int64_t C = c.hidden_size, I = c.intermediate_size;
  const std::string p = "encoder.layers." + std::to_string(layer) + ".";
  const auto eps = static_cast<float>(c.layer_norm_eps);
  auto norm = [&](const std::string& n) { return NormSpec{NormKind::Layer, eps, {p + n + ".weight", {C}}, p + n + ".bias"}; };
  auto part = [&](const std::string& n, Shape shape) { return LinearPart{{p + n + ".weight", shape}, p + n + ".bias"}; };
  ClipVisionLayerSpec s{norm("layer_norm1"),
                        norm("layer_norm2"),
                        part("self_attn.q_proj", {C, C}),
                        part("self_attn.k_proj", {C, C}),
                        part("self_attn.v_proj", {C, C}),
                        part("self_attn.out_proj", {C, C}),
                        {}};
  s.mlp.kind = mlp_kind(c.act);  // (fields one by one: GCC 12 warns on the braced temporary's empty gate)
  s.mlp.hidden = C, s.mlp.inner = I;
  s.mlp.up = part("mlp.fc1", {I, C});
  s.mlp.down = part("mlp.fc2", {C, I});
  s.mlp.pre_norm = s.ln2;
  return s;
}

PatchEmbeddingSpec clip_vision_embedding_spec(const ClipVisionConfig& c) {
  const int64_t C = c.hidden_size, p = c.patch_size;
  PatchEmbeddingSpec s;
  s.image_size = c.image_size, s.patch_size = p, s.channels = c.num_channels;
  s.conv = {{"embeddings.patch_embedding.weight", {C, c.num_channels, p, p}},
            c.siglip ? "embeddings.patch_embedding.bias" : ""};
  if (!c.siglip) s.class_embedding = "embeddings.class_embedding";
  s.positions = {"embeddings.position_embedding.weight", {c.num_positions(), C}};
  return s;
}

NormSpec clip_vision_pre_norm_spec(const ClipVisionConfig& c) {
  return {NormKind::Layer, static_cast<float>(c.layer_norm_eps), {"pre_layrnorm.weight", {c.hidden_size}},
          "pre_layrnorm.bias"};
}

ClipVisionTower::ClipVisionTower(const ClipVisionConfig& c, LayerBackend& b, const WeightSource& w, int64_t num_layers)
    : config_(c) {
  VLM_CHECK(num_layers >= 0 && num_layers <= c.num_layers, "{} of {} vision layers", num_layers, c.num_layers);
  embed_ = b.patch_embedding(w, clip_vision_embedding_spec(c));
  if (!c.siglip) pre_norm_ = b.norm(w, clip_vision_pre_norm_spec(c));
  const int64_t D = c.head_dim();
  attn_ = b.segment_attention({c.num_heads, D, 1.0f / std::sqrt(static_cast<float>(D))});
  rows_ = b.row_ops();
  for (int64_t l = 0; l < num_layers; ++l) {
    const ClipVisionLayerSpec s = clip_vision_layer_spec(c, l);
    Layer L;
    L.qkv = b.linear(w, {s.q, s.k, s.v}, &s.ln1);
    L.o = b.linear(w, {s.o});
    L.mlp = b.mlp(w, s.mlp);  // with ln2
    layers_.push_back(std::move(L));
  }
}

ActivationPlan ClipVisionTower::plan(int64_t N) const {
  const int64_t T = N * tokens_per_image(), C = config_.hidden_size;
  ActivationPlan p;
  p.bufs.resize(kNumBufs);
  p.bufs[kX] = {C, ActRole::Residual, false, T};
  p.bufs[kQkv] = {3 * C, ActRole::Hidden, false, T};
  p.bufs[kAttn] = {C, ActRole::Hidden, false, T};
  p.bufs[kInner] = {layers_.empty() ? 1 : layers_.front().mlp->inner_cols(), ActRole::Hidden, false, T};
  return p;
}

void ClipVisionTower::forward(Step& s, Act pixels, std::span<const int> hidden, bool drop_cls, Act out) const {
  const int64_t N = pixels.rows, L = tokens_per_image(), C = config_.hidden_size, rows = out_rows(drop_cls);
  VLM_CHECK(N > 0 && !hidden.empty(), "vision tower over {} images with {} hidden states", N, hidden.size());
  VLM_CHECK(!drop_cls || !config_.siglip, "drop_cls on a tower without a class token");
  int deepest = 0;
  for (int l : hidden) {
    VLM_CHECK(l >= 0 && l <= num_layers(), "hidden state {} of {} loaded layers", l, num_layers());
    deepest = std::max(deepest, l);
  }
  VLM_CHECK(out.rows == N * rows && out.cols == C * static_cast<int64_t>(hidden.size()),
            "tower output [{}, {}] for {} images of {} rows, {} hidden states", out.rows, out.cols, N, rows, hidden.size());
  std::vector<int64_t> kept(static_cast<size_t>(N * rows));  // [N * rows]: the rows of x the output takes
  for (int64_t r = 0; r < N * rows; ++r) kept[static_cast<size_t>(r)] = (r / rows) * L + (L - rows) + r % rows;
  std::vector<int64_t> cu(static_cast<size_t>(N + 1));  // [N + 1]: one segment per image
  for (int64_t n = 0; n <= N; ++n) cu[static_cast<size_t>(n)] = n * L;

  const Act x = s.act(kX), qkv = s.act(kQkv), a = s.act(kAttn), inner = s.act(kInner);  // [N*L, ...]
  auto emit = [&](int index) {  // hidden state `index` into the columns of each slot that asks for it
    for (size_t j = 0; j < hidden.size(); ++j)
      if (hidden[j] == index) rows_->gather_rows(s, x, kept, out, static_cast<int64_t>(j) * C);
  };
  embed_->forward(s, pixels, x);
  if (pre_norm_) pre_norm_->forward(s, x, x);  // in place
  emit(0);
  for (int l = 0; l < deepest; ++l) {
    const Layer& Ly = layers_[static_cast<size_t>(l)];
    Ly.qkv->forward(s, x, qkv, Accum::Write);  // of ln1(x)
    attn_->forward(s, qkv, nullptr, cu, a);
    Ly.o->forward(s, a, x, Accum::Add);
    Ly.mlp->forward(s, x, inner, x, Accum::Add);  // of ln2(x)
    emit(l + 1);
  }
}

}  // namespace vlm
