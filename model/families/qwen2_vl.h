// Qwen2-VL (Qwen2VLForConditionalGeneration) and Qwen2.5-VL (Qwen2_5_VLForConditionalGeneration):
// the Qwen2 vision tower (model/vision/qwen2_vision.h) encodes each image / video into merged patch
// embeddings spliced into the Qwen2 decoder at the <|image_pad|> / <|video_pad|> tokens; the
// decoder rotates with M-RoPE (model/decoder/mrope_positions.h).
//
// Reads the transformers 5 config (text_config with rope_parameters.mrope_section, vision_config)
// and the legacy flat one (text fields at the top, rope_scaling {"type": "mrope"}); weights
// "model.language_model.*" / "model.visual.*" (5.x layout) or "model.*" / "visual.*" (the
// released checkpoints, and what 5.17's save_pretrained writes), and "lm_head.weight" (or tied).
#pragma once

#include <array>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/decoder/llm_decoder.h"
#include "model/decoder/model_config.h"
#include "model/families/model.h"
#include "model/decoder/mrope_positions.h"
#include "model/vision/qwen2_vision.h"
#include "model/decoder/weights.h"

namespace vlm {

struct Qwen2VLConfig {
  ModelConfig text;  // architecture Qwen2ForCausalLM, rope.mrope_section set
  Qwen2VisionConfig vision;
  int32_t image_token_id = 151655;
  int32_t video_token_id = 151656;
  int32_t vision_start_token_id = 151652;
  int32_t vision_end_token_id = 151653;

  // Throws LoadError naming `source` for missing/invalid fields, an architecture other than the
  // two, a missing mrope_section, or a merger width unlike the text hidden size.
  static Qwen2VLConfig from_json(const nlohmann::json& j, const std::string& source);
  static Qwen2VLConfig load(const std::string& model_dir);
};

class Qwen2VLModel : public Model {
 public:
  // Loads DIR/config.json and the weights. Throws LoadError naming the file (and tensor).
  static std::unique_ptr<Qwen2VLModel> load(const std::string& model_dir, const WeightLoadOptions& options = {});
  Qwen2VLModel(Qwen2VLConfig config, WeightStore weights);

  const Qwen2VLConfig& config() const { return config_; }
  const LlmDecoder& decoder() const override { return *decoder_; }
  const Qwen2VisionEncoder& vision() const { return *vision_; }
  VisionBinding vision_binding() const override { return Qwen2VisionBinding{vision_.get()}; }

  // Model. An item is MediaPixels with grid_thw set and data [t*h*w, patch_dim]
  // (model/qwen2vl_preprocess); an image has t = 1. It takes t*h*w / merge^2 prompt tokens,
  // h*w / merge^2 per temporal grid step (tokens_per_frame).
  bool has_media() const override { return true; }
  bool accepts_video() const override { return true; }
  int64_t vision_head_dim() const override { return config_.vision.head_dim(); }
  int32_t image_token_id() const override { return config_.image_token_id; }
  int32_t video_token_id() const override { return config_.video_token_id; }
  int64_t media_tokens(const MediaPixels& item, int k) const override;
  int64_t tokens_per_frame(const MediaPixels& item) const override;
  void encode_media(std::span<const MediaPixels* const> items, float* out) const override;
  // positions() of the items' grids (videos: their second_per_grid).
  std::optional<MropePositions> mrope_positions(std::span<const int32_t> ids,
                                                std::span<const MediaPixels> items) const override;

  // Preprocessed patches of N items (images, or videos) -> embeddings [sum t*h*w / 4, C].
  void encode(const float* pixels /*[P, K]*/, std::span<const std::array<int32_t, 3>> grids, float* out) const;

  // M-RoPE positions of a prompt of token ids (get_rope_index). second_per_grid: per video
  // (Qwen2.5-VL: temporal_patch_size / fps; empty = 1 s); ignored by Qwen2-VL.
  MropePositions positions(std::span<const int32_t> ids, std::span<const std::array<int32_t, 3>> image_grids,
                           std::span<const std::array<int32_t, 3>> video_grids,
                           std::span<const float> second_per_grid = {}) const;

 private:
  Qwen2VLConfig config_;
  WeightStore weights_;
  std::unique_ptr<LlmDecoder> decoder_;
  std::unique_ptr<Qwen2VisionEncoder> vision_;
};

}  // namespace vlm
