#include "model/vision/clip_vision.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/arch/clip_vision_tower.h"
#include "model/layers/cpu/cpu_layers.h"
#include "model/layers/cpu/cpu_step.h"

namespace vlm {

ClipVisionConfig ClipVisionConfig::from_json(const nlohmann::json& j, const std::string& source) {
  ClipVisionConfig c;
  c.siglip = j.contains("model_type") && j["model_type"] == "siglip_vision_model";
  if (c.siglip) c.patch_size = 16, c.layer_norm_eps = 1e-6;
  auto num = [&](const char* key, int64_t& dst) {
    if (!j.contains(key) || j[key].is_null()) return;
    if (!j[key].is_number_integer() || j[key].get<int64_t>() <= 0)
      throw LoadError(source + ": vision_config field '" + key + "' must be a positive integer");
    dst = j[key].get<int64_t>();
  };
  num("hidden_size", c.hidden_size);
  num("intermediate_size", c.intermediate_size);
  num("num_hidden_layers", c.num_layers);
  num("num_attention_heads", c.num_heads);
  num("num_channels", c.num_channels);
  num("image_size", c.image_size);
  num("patch_size", c.patch_size);
  if (j.contains("layer_norm_eps") && j["layer_norm_eps"].is_number()) c.layer_norm_eps = j["layer_norm_eps"].get<double>();
  const std::string act = j.contains("hidden_act") && j["hidden_act"].is_string() ? j["hidden_act"].get<std::string>()
                          : c.siglip                                               ? "gelu_pytorch_tanh"
                                                                                   : "quick_gelu";
  if (act == "quick_gelu") c.act = VisionActivation::QuickGelu;
  else if (act == "gelu") c.act = VisionActivation::Gelu;
  else if (act == "gelu_pytorch_tanh") c.act = VisionActivation::GeluTanh;
  else
    throw LoadError(source + ": unsupported vision hidden_act '" + act +
                    "' (supported: quick_gelu, gelu, gelu_pytorch_tanh)");
  if (c.hidden_size % c.num_heads != 0)
    throw LoadError(source + fmt::format(": vision hidden_size {} is not a multiple of num_attention_heads {}",
                                         c.hidden_size, c.num_heads));
  // Not necessarily a multiple: the stride-p conv drops the last image_size % patch_size pixels
  // of each row and column (SigLIP-so400m at 384 px with 14-px patches: 27 x 27 patches, as the
  // released LLaVA-OneVision checkpoints have it).
  if (c.patch_size <= 0 || c.image_size < c.patch_size)
    throw LoadError(source + fmt::format(": vision image_size {} is smaller than patch_size {}", c.image_size,
                                         c.patch_size));
  if (c.num_channels != 3) throw LoadError(source + ": only 3-channel vision towers are supported");
  return c;
}

TensorView ClipVisionEncoder::f32_copy(const TensorView& t) {
  Tensor f = Tensor::empty(t.shape, DType::F32);
  convert_to_f32(t.data, t.dtype, f.as<float>(), t.numel());
  TensorView v = f.view();
  storage_.push_back(std::move(f));
  return v;
}

ClipVisionEncoder::ClipVisionEncoder(const ClipVisionConfig& config, const WeightLookup& lookup,
                                     const std::string& prefix, int64_t num_layers_used)
    : config_(config) {
  const WeightSource w(lookup, prefix);
  backend_ = std::make_unique<CpuLayers>();
  tower_ = std::make_unique<ClipVisionTower>(config, *backend_, w, num_layers_used);
  // The same tensors by role, for a copy on another device (names from the tower's specs).
  const int64_t C = config.hidden_size;
  const PatchEmbeddingSpec e = clip_vision_embedding_spec(config);
  const TensorView conv = w.get(e.conv.weight);
  patch_w_ = TensorView(conv.data, conv.dtype, {C, conv.numel() / C});
  auto f32 = [&](const std::string& name, const Shape& shape, std::vector<float>& dst) {
    TensorView t = w.get(name, shape);
    dst.resize(static_cast<size_t>(t.numel()));
    convert_to_f32(t.data, t.dtype, dst.data(), t.numel());
  };
  if (!e.conv.bias.empty()) f32(e.conv.bias, {C}, patch_b_);
  if (!e.class_embedding.empty()) f32(e.class_embedding, {C}, class_emb_);
  f32(e.positions.name, e.positions.shape, pos_emb_);
  if (!config.siglip) {
    const NormSpec pre = clip_vision_pre_norm_spec(config);
    pre_ln_w_ = w.get(pre.weight);
    pre_ln_b_ = w.get(pre.bias, pre.weight.shape);
  }
  auto bias = [&](const LinearPart& p) { return f32_copy(w.get(p.bias, {p.weight.shape[0]})); };
  for (int64_t l = 0; l < num_layers_used; ++l) {
    const ClipVisionLayerSpec s = clip_vision_layer_spec(config, l);
    Layer L;
    L.ln1_w = w.get(s.ln1.weight);
    L.ln1_b = w.get(s.ln1.bias, s.ln1.weight.shape);
    L.ln2_w = w.get(s.ln2.weight);
    L.ln2_b = w.get(s.ln2.bias, s.ln2.weight.shape);
    L.q = w.get(s.q.weight), L.q_b = bias(s.q);
    L.k = w.get(s.k.weight), L.k_b = bias(s.k);
    L.v = w.get(s.v.weight), L.v_b = bias(s.v);
    L.o = w.get(s.o.weight), L.o_b = bias(s.o);
    L.fc1 = w.get(s.mlp.up.weight), L.fc1_b = bias(s.mlp.up);
    L.fc2 = w.get(s.mlp.down.weight), L.fc2_b = bias(s.mlp.down);
    layers_.push_back(L);
  }
}

ClipVisionEncoder::~ClipVisionEncoder() = default;

void ClipVisionEncoder::encode(const float* pixels, int64_t N, std::span<const int> layers, bool drop_cls,
                               float* out) const {
  VLM_CHECK(N > 0 && !layers.empty(), "encode N={} with {} layers", N, layers.size());
  const ClipVisionConfig& c = config_;
  const ActivationPlan plan = tower_->plan(N);
  CpuStep step(plan, N * c.num_positions());
  const int64_t rows = tower_->out_rows(drop_cls), S = c.image_size;
  tower_->forward(step, Act{const_cast<float*>(pixels), N, c.num_channels * S * S, DType::F32}, layers, drop_cls,
                  Act{out, N * rows, c.hidden_size * static_cast<int64_t>(layers.size()), DType::F32});
}

}  // namespace vlm
