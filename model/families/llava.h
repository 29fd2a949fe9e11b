// LLaVA-1.5 (LlavaForConditionalGeneration): CLIP vision tower -> hidden state(s)
// `vision_feature_layer` (class token dropped for the "default" strategy) -> LlavaProjector ->
// image embeddings spliced into the Llama decoder's input at the image tokens.
//
// Reads both config layouts: released checkpoints (transformers 4.x: "image_token_index",
// "torch_dtype", sparse text_config/vision_config relying on LlamaConfig/CLIPVisionConfig
// defaults) and transformers 5 (full nested configs, "image_token_id" or "image_token_index");
// and both weight layouts: "language_model.model.*", "language_model.lm_head.*",
// "vision_tower.vision_model.*", "multi_modal_projector.*" (4.x) and "model.language_model.*",
// "lm_head.*", "model.vision_tower.*", "model.multi_modal_projector.*" (5.x).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/vision/clip_vision.h"
#include "model/decoder/llm_decoder.h"
#include "model/decoder/model_config.h"
#include "model/families/multimodal_input.h"
#include "model/families/model.h"
#include "model/vision/projector.h"
#include "model/decoder/weights.h"

namespace vlm {

class LayerBackend;
class LlavaVision;

struct LlavaConfig {
  ModelConfig text;
  ClipVisionConfig vision;
  int32_t image_token_id = 32000;
  std::vector<int> feature_layers;  // resolved hidden-state indices in [0, vision.num_layers]
  bool drop_cls = true;             // vision_feature_select_strategy "default" (vs "full")
  bool projector_bias = true;

  int64_t tokens_per_image() const { return vision.num_positions() - (drop_cls ? 1 : 0); }

  // Throws LoadError naming `source` for a missing/invalid text or vision config, an unsupported
  // projector activation or select strategy, or a feature layer out of range.
  static LlavaConfig from_json(const nlohmann::json& j, const std::string& source);
  static LlavaConfig load(const std::string& model_dir);
};

class LlavaModel : public Model {
 public:
  // Loads DIR/config.json and the weights. Throws LoadError naming the file (and tensor).
  static std::unique_ptr<LlavaModel> load(const std::string& model_dir, const WeightLoadOptions& options = {});
  LlavaModel(LlavaConfig config, WeightStore weights);
  ~LlavaModel() override;

  const LlavaConfig& config() const { return config_; }
  const WeightStore& weights() const { return weights_; }
  const LlmDecoder& decoder() const override { return *decoder_; }
  int64_t tokens_per_image() const { return config_.tokens_per_image(); }
  // The side S of the square pixel input [3, S, S] encode_images() expects.
  int image_size() const { return static_cast<int>(config_.vision.image_size); }
  int64_t vision_head_dim() const override { return config_.vision.head_dim(); }
  int32_t image_token_id() const override { return config_.image_token_id; }
  // The tower's and the projector's weights by role (the GPU copy reads them).
  const ClipVisionEncoder& vision() const { return *vision_; }
  const LlavaProjector& projector() const { return *projector_; }

  // Model: images only; each [3, S, S] and tokens_per_image tokens.
  bool has_media() const override { return true; }
  VisionBinding vision_binding() const override;
  int64_t media_tokens(const MediaPixels& item, int k) const override;
  void encode_media(std::span<const MediaPixels* const> items, float* out) const override;

  // pixels[N, 3, S, S] -> selected vision features [N, tokens_per_image, Cv * num_feature_layers].
  void vision_features(const float* pixels, int64_t N, float* out) const;
  // pixels[N, 3, S, S] -> image embeddings [N, tokens_per_image, C] (projector output).
  void encode_images(const float* pixels, int64_t N, float* out) const;

  // The tagged prompt of token ids holding num_images images (see expand_image_tokens).
  MultimodalPrompt build_prompt(std::span<const int32_t> ids, int32_t num_images) const;

  // The tower and projector over the CPU layers (model/arch/llava_wiring.h).
  const LlavaVision& wiring() const { return *wiring_; }
  // The tower's and the projector's tensors under their prefixes (another backend's LlavaVision).
  WeightSource tower_weights() const { return WeightSource(weights_, tower_prefix_); }
  WeightSource projector_weights() const { return WeightSource(weights_, projector_prefix_); }

 private:
  LlavaConfig config_;
  WeightStore weights_;
  std::string tower_prefix_, projector_prefix_;
  std::unique_ptr<LlmDecoder> decoder_;
  std::unique_ptr<ClipVisionEncoder> vision_;
  std::unique_ptr<LlavaProjector> projector_;
  std::unique_ptr<LayerBackend> backend_;  // CpuLayers
  std::unique_ptr<LlavaVision> wiring_;    // tower + projector over layers (model/arch/llava_wiring.h)
};

}  // namespace vlm
