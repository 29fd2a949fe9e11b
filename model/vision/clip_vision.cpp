#include "model/vision/clip_vision.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "kernels/attention/dense_attention.h"
#include "kernels/core/check.h"
#include "kernels/gemm/gemm.h"
#include "kernels/ops/ops.h"
#include "kernels/ops/vision_ops.h"

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
  if (c.image_size % c.patch_size != 0)
    throw LoadError(source + fmt::format(": vision image_size {} is not a multiple of patch_size {}",
                                         c.image_size, c.patch_size));
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

ClipVisionEncoder::ClipVisionEncoder(const ClipVisionConfig& config, const WeightLookup& w,
                                     const std::string& prefix, int64_t num_layers_used)
    : config_(config) {
  const int64_t C = config.hidden_size, I = config.intermediate_size, p = config.patch_size;
  const int64_t L = config.num_positions();
  VLM_CHECK(num_layers_used >= 0 && num_layers_used <= config.num_layers, "{} of {} vision layers",
            num_layers_used, config.num_layers);
  const std::string e = prefix + "embeddings.";
  TensorView conv = w(e + "patch_embedding.weight", {C, 3, p, p});
  patch_w_ = TensorView(conv.data, conv.dtype, {C, 3 * p * p});
  auto f32 = [&](const std::string& name, const Shape& shape, std::vector<float>& dst) {
    TensorView t = w(name, shape);
    dst.resize(static_cast<size_t>(t.numel()));
    convert_to_f32(t.data, t.dtype, dst.data(), t.numel());
  };
  if (config.siglip) {
    f32(e + "patch_embedding.bias", {C}, patch_b_);
  } else {
    f32(e + "class_embedding", {C}, class_emb_);
    pre_ln_w_ = w(prefix + "pre_layrnorm.weight", {C});
    pre_ln_b_ = w(prefix + "pre_layrnorm.bias", {C});
  }
  f32(e + "position_embedding.weight", {L, C}, pos_emb_);
  for (int64_t l = 0; l < num_layers_used; ++l) {
    const std::string lp = prefix + "encoder.layers." + std::to_string(l) + ".";
    Layer L;
    L.ln1_w = w(lp + "layer_norm1.weight", {C});
    L.ln1_b = w(lp + "layer_norm1.bias", {C});
    L.ln2_w = w(lp + "layer_norm2.weight", {C});
    L.ln2_b = w(lp + "layer_norm2.bias", {C});
    L.q = w(lp + "self_attn.q_proj.weight", {C, C});
    L.k = w(lp + "self_attn.k_proj.weight", {C, C});
    L.v = w(lp + "self_attn.v_proj.weight", {C, C});
    L.o = w(lp + "self_attn.out_proj.weight", {C, C});
    L.q_b = f32_copy(w(lp + "self_attn.q_proj.bias", {C}));
    L.k_b = f32_copy(w(lp + "self_attn.k_proj.bias", {C}));
    L.v_b = f32_copy(w(lp + "self_attn.v_proj.bias", {C}));
    L.o_b = f32_copy(w(lp + "self_attn.out_proj.bias", {C}));
    L.fc1 = w(lp + "mlp.fc1.weight", {I, C});
    L.fc2 = w(lp + "mlp.fc2.weight", {C, I});
    L.fc1_b = f32_copy(w(lp + "mlp.fc1.bias", {I}));
    L.fc2_b = f32_copy(w(lp + "mlp.fc2.bias", {C}));
    layers_.push_back(L);
  }
}

void ClipVisionEncoder::encode(const float* pixels, int64_t N, std::span<const int> layers,
                               bool drop_cls, float* out) const {
  const ClipVisionConfig& c = config_;
  const int64_t C = c.hidden_size, I = c.intermediate_size, p = c.patch_size, S = c.image_size;
  const int64_t G = c.grid(), P = c.num_patches(), L = c.num_positions(), T = N * L;
  const int64_t cls = L - P;  // 1 (CLIP's class token) or 0 (SigLIP)
  const int H = static_cast<int>(c.num_heads), D = static_cast<int>(c.head_dim());
  const float eps = static_cast<float>(c.layer_norm_eps);
  VLM_CHECK(N > 0 && !layers.empty(), "encode N={} with {} layers", N, layers.size());
  VLM_CHECK(!drop_cls || cls == 1, "drop_cls on a tower without a class token");
  int deepest = 0;
  for (int l : layers) {
    VLM_CHECK(l >= 0 && l <= static_cast<int>(layers_.size()), "hidden state {} of {} loaded layers", l,
              layers_.size());
    deepest = std::max(deepest, l);
  }

  // Unfold the patches: row (n, gy, gx) holds [ch, ky, kx], the conv weight's layout.
  Tensor patches = Tensor::empty({N * P, 3 * p * p});
  float* pp = patches.as<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t gy = 0; gy < G; ++gy)
      for (int64_t gx = 0; gx < G; ++gx) {
        float* row = pp + ((n * G + gy) * G + gx) * 3 * p * p;
        for (int64_t ch = 0; ch < 3; ++ch)
          for (int64_t ky = 0; ky < p; ++ky) {
            const float* src = pixels + ((n * 3 + ch) * S + gy * p + ky) * S + gx * p;
            std::copy(src, src + p, row + (ch * p + ky) * p);
          }
      }
  Tensor pe = Tensor::empty({N * P, C});
  linear(pp, N * P, patch_w_, patch_b_.empty() ? nullptr : patch_b_.data(), pe.as<float>());

  Tensor x = Tensor::empty({T, C});  // residual stream [N * L, Cv]
  float* xp = x.as<float>();
  for (int64_t n = 0; n < N; ++n) {
    if (cls)
      for (int64_t i = 0; i < C; ++i) xp[n * L * C + i] = class_emb_[i] + pos_emb_[i];
    for (int64_t t = cls; t < L; ++t)
      for (int64_t i = 0; i < C; ++i)
        xp[(n * L + t) * C + i] = pe.as<float>()[(n * P + t - cls) * C + i] + pos_emb_[t * C + i];
  }
  if (!c.siglip) layer_norm(xp, pre_ln_w_, pre_ln_b_, eps, T, xp);

  const int64_t first = drop_cls ? 1 : 0, rows = L - first;
  const int64_t out_c = C * static_cast<int64_t>(layers.size());
  auto emit = [&](int hidden_index) {
    for (size_t j = 0; j < layers.size(); ++j) {
      if (layers[j] != hidden_index) continue;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t t = 0; t < rows; ++t)
          std::copy(xp + (n * L + first + t) * C, xp + (n * L + first + t + 1) * C,
                    out + (n * rows + t) * out_c + static_cast<int64_t>(j) * C);
    }
  };
  emit(0);

  Tensor h = Tensor::empty({T, C}), q = Tensor::empty({T, C}), k = Tensor::empty({T, C});
  Tensor v = Tensor::empty({T, C}), attn = Tensor::empty({T, C}), f = Tensor::empty({T, I});
  float* hp = h.as<float>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int l = 0; l < deepest; ++l) {
    const Layer& Ly = layers_[l];
    layer_norm(xp, Ly.ln1_w, Ly.ln1_b, eps, T, hp);
    linear(hp, T, Ly.q, Ly.q_b.as<const float>(), q.as<float>());
    linear(hp, T, Ly.k, Ly.k_b.as<const float>(), k.as<float>());
    linear(hp, T, Ly.v, Ly.v_b.as<const float>(), v.as<float>());
    dense_attention(q.as<float>(), k.as<float>(), v.as<float>(), N, L, H, D, scale, attn.as<float>());
    linear(attn.as<float>(), T, Ly.o, Ly.o_b.as<const float>(), hp);
    add_inplace(xp, hp, T * C);
    layer_norm(xp, Ly.ln2_w, Ly.ln2_b, eps, T, hp);
    linear(hp, T, Ly.fc1, Ly.fc1_b.as<const float>(), f.as<float>());
    if (c.act == VisionActivation::QuickGelu) quick_gelu(f.as<float>(), T * I);
    else if (c.act == VisionActivation::GeluTanh) gelu_tanh(f.as<float>(), T * I);
    else gelu_erf(f.as<float>(), T * I);
    linear(f.as<float>(), T, Ly.fc2, Ly.fc2_b.as<const float>(), hp);
    add_inplace(xp, hp, T * C);
    emit(l + 1);
  }
}

}  // namespace vlm
