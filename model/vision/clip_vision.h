// CLIPVisionModel (transformers modeling_clip) and SiglipVisionModel (modeling_siglip,
// config.siglip) on the CPU: the tower written over layers (model/arch/clip_vision_tower.h: patch
// embedding, class token and positions, pre-LayerNorm for CLIP, pre-LN encoder layers) run on
// CpuLayers, plus its weights by role for a copy on another device (model/vision/cuda). Returns
// the hidden states the caller selects (HF hidden_states[i]: i = 0 is the embeddings (CLIP: after
// the pre-LayerNorm), i = l after layer l), so only the layers up to the deepest selected one run.
// post_layernorm is never needed by LLaVA. f32 compute over weights kept in their stored dtype.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kernels/core/tensor.h"
#include "model/layers/weight_source.h"  // WeightLookup

namespace vlm {

class LayerBackend;
class ClipVisionTower;

enum class VisionActivation { QuickGelu, Gelu, GeluTanh };

struct ClipVisionConfig {  // defaults: transformers CLIPVisionConfig (SiglipVisionConfig's when siglip)
  int64_t hidden_size = 768;         // Cv
  int64_t intermediate_size = 3072;  // Iv
  int64_t num_layers = 12;
  int64_t num_heads = 12;
  int64_t num_channels = 3;
  int64_t image_size = 224;          // S
  int64_t patch_size = 32;           // p
  double layer_norm_eps = 1e-5;
  VisionActivation act = VisionActivation::QuickGelu;
  bool siglip = false;  // model_type siglip_vision_model: no class token, no pre-LayerNorm, conv bias

  int64_t grid() const { return image_size / patch_size; }
  int64_t num_patches() const { return grid() * grid(); }  // P
  int64_t num_positions() const { return num_patches() + (siglip ? 0 : 1); }  // L: tokens per image
  int64_t head_dim() const { return hidden_size / num_heads; }

  // Missing fields take CLIPVisionConfig's defaults (SiglipVisionConfig's for model_type
  // "siglip_vision_model"). Throws LoadError (naming `source`) for an
  // unsupported hidden_act, a hidden size not divisible by the heads, or an image size not
  // divisible by the patch size.
  static ClipVisionConfig from_json(const nlohmann::json& j, const std::string& source);
};


class ClipVisionEncoder {
 public:
  // Loads `prefix` + "embeddings.*", "pre_layrnorm.*" (CLIP) and "encoder.layers.{0..num_layers_used-1}.*".
  ClipVisionEncoder(const ClipVisionConfig& config, const WeightLookup& weights,
                    const std::string& prefix, int64_t num_layers_used);
  ~ClipVisionEncoder();

  const ClipVisionConfig& config() const { return config_; }

  // pixels[N, 3, S, S] -> out[N, L - drop_cls, Cv * layers.size()]: hidden states `layers`
  // (indices in [0, num_layers_used]) concatenated along the feature dim, in the given order, with
  // the first row (CLIP's class token) dropped when drop_cls. All N images run through each layer
  // together.
  void encode(const float* pixels, int64_t N, std::span<const int> layers, bool drop_cls,
              float* out) const;

  // The weights, for a copy on another device (model/vision/cuda).
  struct Layer {
    TensorView ln1_w, ln1_b, ln2_w, ln2_b;  // [Cv]
    TensorView q, k, v, o;                  // [Cv, Cv]
    TensorView q_b, k_b, v_b, o_b;          // [Cv] f32 copies
    TensorView fc1, fc2;                    // [Iv, Cv], [Cv, Iv]
    TensorView fc1_b, fc2_b;                // [Iv], [Cv] f32 copies
  };
  const std::vector<Layer>& layers() const { return layers_; }
  const TensorView& patch_weight() const { return patch_w_; }             // [Cv, 3 * p * p]
  const std::vector<float>& patch_bias() const { return patch_b_; }       // [Cv] (SigLIP), else empty
  const std::vector<float>& class_embedding() const { return class_emb_; }  // [Cv] (CLIP), else empty
  const std::vector<float>& position_embedding() const { return pos_emb_; }  // [L, Cv]
  const TensorView& pre_ln_weight() const { return pre_ln_w_; }           // [Cv] (CLIP)
  const TensorView& pre_ln_bias() const { return pre_ln_b_; }

 private:
  TensorView f32_copy(const TensorView& t);

  ClipVisionConfig config_;
  TensorView patch_w_;            // [Cv, 3 * p * p] (the conv weight, flattened)
  std::vector<float> patch_b_;    // [Cv] (SigLIP), else empty
  std::vector<float> class_emb_;  // [Cv] (CLIP), else empty
  std::vector<float> pos_emb_;    // [L, Cv]
  TensorView pre_ln_w_, pre_ln_b_;
  std::vector<Layer> layers_;
  std::vector<Tensor> storage_;   // f32 bias copies
  std::unique_ptr<LayerBackend> backend_;  // CpuLayers
  std::unique_ptr<ClipVisionTower> tower_;  // the forward (model/arch/clip_vision_tower.h)
};

}  // namespace vlm
