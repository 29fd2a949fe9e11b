// LLaVA-OneVision / LLaVA-Video (LlavaOnevisionForConditionalGeneration): a SigLIP tower and the
// LLaVA projector (LlavaModel, model/families/llava.h) over tiles of 3 x S x S pixels, a Qwen2
// decoder with 1-D positions, and the layout of transformers 5.17's modeling_llava_onevision:
//   image (AnyRes): the base tile's g*g features, then the tiles' feature grid unpadded to the
//     image's aspect, bilinearly shrunk past anyres_max_N (vision_aspect_ratio), each row
//     followed by image_newline (model/media/anyres.h);
//   video: each frame's projected g x g features pooled bilinearly to ceil(g/2)^2, frames one
//     after the other, one image_newline after the last frame.
// MediaPixels: an image is data [1 + tiles, 3, S, S] (base first, tiles row-major) with
// height/width the original image's size; a video is data [F, 3, S, S], num_frames F.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/families/llava.h"
#include "model/media/anyres.h"

namespace vlm {

class LayerBackend;
class OnevisionWiring;

struct LlavaOnevisionConfig {
  LlavaConfig llava;                   // text (qwen2), vision (siglip), projector, image token
  int32_t video_token_id = 151647;
  std::vector<Resolution> grid_pinpoints;  // (height, width) pairs
  int max_num_patches = 9;                 // vision_aspect_ratio "anyres_max_N"

  // Throws LoadError naming `source` for what LlavaConfig refuses, a missing or malformed
  // image_grid_pinpoints (each a multiple of the tower's image size), or a vision_aspect_ratio
  // other than "anyres_max_N".
  static LlavaOnevisionConfig from_json(const nlohmann::json& j, const std::string& source);
  static LlavaOnevisionConfig load(const std::string& model_dir);
};

class LlavaOnevisionModel : public Model {
 public:
  // Loads DIR/config.json and the weights (both LLaVA weight layouts, plus image_newline).
  static std::unique_ptr<LlavaOnevisionModel> load(const std::string& model_dir,
                                                   const WeightLoadOptions& options = {});
  LlavaOnevisionModel(LlavaOnevisionConfig config, std::unique_ptr<LlavaModel> base);
  ~LlavaOnevisionModel() override;

  const LlavaOnevisionConfig& config() const { return config_; }
  const LlmDecoder& decoder() const override { return base_->decoder(); }
  const LlavaModel& base() const { return *base_; }  // the tower and projector (LLaVA's)
  bool has_media() const override { return true; }
  bool accepts_video() const override { return true; }
  VisionBinding vision_binding() const override;
  int64_t vision_head_dim() const override { return config_.llava.vision.head_dim(); }
  int32_t image_token_id() const override { return config_.llava.image_token_id; }
  int32_t video_token_id() const override { return config_.video_token_id; }
  int tile_size() const { return static_cast<int>(config_.llava.vision.image_size); }
  int grid() const { return static_cast<int>(config_.llava.vision.grid()); }

  // The AnyRes layout of an image of the given original size.
  AnyresLayout image_layout(Resolution image) const;
  // Throws RequestError (400) for data that is not whole 3 x S x S tiles, an image whose tile
  // count is not its AnyRes layout's, or another modality.
  int64_t media_tokens(const MediaPixels& item, int k) const override;
  // Video: ceil(g/2)^2 (the newline after the last frame is one more token of the item).
  int64_t tokens_per_frame(const MediaPixels& item) const override;
  void encode_media(std::span<const MediaPixels* const> items, float* out) const override;

  // tiles[N, 3, S, S] -> the tower's selected features [N, L, Cv * layers] (before the projector).
  void vision_features(const float* tiles, int64_t N, float* out) const { base_->vision_features(tiles, N, out); }
  // One item -> its embeddings [media_tokens, C].
  void encode_item(const MediaPixels& item, float* out) const;

 private:
  LlavaOnevisionConfig config_;
  std::unique_ptr<LlavaModel> base_;
  std::string newline_;                       // image_newline's tensor name
  std::unique_ptr<LayerBackend> backend_;     // CpuLayers
  std::unique_ptr<OnevisionWiring> wiring_;   // tiles and frames to rows (model/arch/onevision_wiring.h)
};

}  // namespace vlm
