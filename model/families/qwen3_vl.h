// Qwen3-VL (Qwen3VLForConditionalGeneration, transformers 5.17; dense): the Qwen3-VL vision tower
// (model/arch/qwen3_vl_vision_tower.h) encodes each image / video into merged patch embeddings
// spliced into the Qwen3 decoder at the <|image_pad|> / <|video_pad|> tokens, plus K DeepStack
// planes the decoder adds to those rows after its first K layers (ModelConfig::deepstack_layers);
// the decoder rotates with interleaved M-RoPE.
//
// Videos: the processor writes a video of t temporal groups as t runs of video tokens, each after
// its timestamp text ("<%.1f seconds><|vision_start|>" ... "<|vision_end|>"; qwen3vl_media.h). The
// engine takes an item's tokens as one consecutive run, so a video goes to the engine as t media
// items of grid (1, h, w), one per group (split_video): the tower attends within one frame group
// and its positions and rotary angles are the same for every group, so the t items encode to
// exactly the rows of the whole video, and get_rope_index splits its grids the same way.
//
// Checkpoints: config.json as Qwen3VLConfig reads it (model/families/qwen3_vl_config.h); weights
// "model.language_model.*" / "model.visual.*" (what 5.17's save_pretrained writes and the released
// checkpoints hold) or "model.*" / "visual.*", and "lm_head.weight" (or tied).
#pragma once

#include <array>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/arch/qwen3_vl_vision_tower.h"
#include "model/decoder/llm_decoder.h"
#include "model/decoder/mrope_positions.h"
#include "model/decoder/weights.h"
#include "model/families/model.h"
#include "model/families/qwen3_vl_config.h"

namespace vlm {

class Qwen3VLModel : public Model {
 public:
  // Loads DIR/config.json and the weights. Throws LoadError naming the file (and tensor, or the
  // config field we do not implement).
  static std::unique_ptr<Qwen3VLModel> load(const std::string& model_dir, const WeightLoadOptions& options = {});
  Qwen3VLModel(Qwen3VLConfig config, WeightStore weights);
  ~Qwen3VLModel() override;

  const Qwen3VLConfig& config() const { return config_; }
  const LlmDecoder& decoder() const override { return *decoder_; }
  // The vision tower's tensors ("patch_embed.*", "blocks.N.*", ... under their prefix): what a
  // GPU runner builds its own Qwen3VLVisionTower from (CudaQwen3VLVisionRunner).
  WeightSource vision_weights() const { return WeightSource(weights_, vision_prefix_); }
  VisionBinding vision_binding() const override { return Qwen3VLVisionBinding{config_.vision, vision_weights()}; }

  // Model. An item is MediaPixels with grid_thw set, in the Rows form with data
  // [t*h*w, patch_dim] (qwen2vl_preprocess with the checkpoint's 16-px settings), or in the
  // Frames8 form (8-bit frames, their settings and resize target; model/media/qwen2vl_frames.h:
  // the loader makes it for the CUDA backend, whose encoder makes the rows on the GPU;
  // encode_media makes them on the CPU with qwen2vl_frames_rows, and media_tokens refuses frames
  // whose count, target or patch settings do not give the grid); an image has
  // t = 1; a video item as the engine takes it has t = 1 too (split_video), though the encoder
  // takes any t. It takes t*h*w / merge^2 prompt tokens, h*w / merge^2 per temporal group.
  bool has_media() const override { return true; }
  bool accepts_video() const override { return true; }
  int64_t vision_head_dim() const override { return config_.vision.head_dim(); }
  int32_t image_token_id() const override { return config_.image_token_id; }
  int32_t video_token_id() const override { return config_.video_token_id; }
  int64_t embedding_planes() const override { return 1 + config_.vision.num_deepstack(); }
  int64_t media_tokens(const MediaPixels& item, int k) const override;
  int64_t tokens_per_frame(const MediaPixels& item) const override;
  // out [sum tokens, (1 + K) * C]: each row its merger plane, then its K DeepStack planes.
  void encode_media(std::span<const MediaPixels* const> items, float* out) const override;
  std::optional<MropePositions> mrope_positions(std::span<const int32_t> ids,
                                                std::span<const MediaPixels> items) const override;

  // Preprocessed patches of items with `grids` -> out [U, (1 + K) * C] (the planes side by side).
  void encode(const float* pixels /*[P, K]*/, std::span<const std::array<int32_t, 3>> grids, float* out) const;

  // M-RoPE positions of a prompt of token ids (Qwen3-VL's get_rope_index): each video grid
  // (t, h, w) counts as t grids (1, h, w), one per run of video tokens; text runs (timestamps
  // included) advance the position as text. Throws RequestError (400) as compute_mrope_positions.
  MropePositions positions(std::span<const int32_t> ids, std::span<const std::array<int32_t, 3>> image_grids,
                           std::span<const std::array<int32_t, 3>> video_grids) const;

  // A video item of grid (t, h, w) -> t items of grid (1, h, w), its temporal groups in order, in
  // its form (qwen3vl_split_video: rows [g*h*w, (g+1)*h*w) each, or a Frames8 video's frames of
  // each group; second_per_grid kept, num_frames the group's given frames).
  std::vector<MediaPixels> split_video(const MediaPixels& video) const;

 private:
  Qwen3VLConfig config_;
  WeightStore weights_;
  std::string vision_prefix_;  // "model.visual." or "visual."
  std::unique_ptr<LlmDecoder> decoder_;
  std::unique_ptr<LayerBackend> layers_;  // CpuLayers for the tower
  std::unique_ptr<Qwen3VLVisionTower> tower_;
};

}  // namespace vlm
