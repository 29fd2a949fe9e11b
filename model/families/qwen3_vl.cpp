// Qwen3VLModel (model/families/qwen3_vl.h). Restated from transformers 5.17's modeling_qwen3_vl.py
// (get_rope_index, get_image_features, the DeepStack planes of Qwen3VLModel.forward); no code taken.
#include "model/families/qwen3_vl.h"

#include <algorithm>

#include <fmt/format.h>

#include "kernels/core/check.h"
#include "kernels/core/log.h"
#include "model/layers/cpu/cpu_layers.h"
#include "model/layers/cpu/cpu_step.h"
#include "model/media/qwen2vl_frames.h"
#include "model/media/qwen3vl_video.h"

namespace vlm {

std::unique_ptr<Qwen3VLModel> Qwen3VLModel::load(const std::string& model_dir, const WeightLoadOptions& options) {
  return std::make_unique<Qwen3VLModel>(Qwen3VLConfig::load(model_dir), WeightStore::open(model_dir, options));
}

Qwen3VLModel::Qwen3VLModel(Qwen3VLConfig config, WeightStore weights)
    : config_(std::move(config)), weights_(std::move(weights)) {
  DecoderWeightNames names;
  names.prefix = weights_.first_prefix({"model.language_model.", "model."}, "embed_tokens.weight",
                                       "Qwen3-VL checkpoint, language model");
  names.lm_head = "lm_head.weight";
  decoder_ = std::make_unique<LlmDecoder>(config_.text, weights_, names);
  vision_prefix_ = weights_.first_prefix({"model.visual.", "visual."}, "patch_embed.proj.weight",
                                         "Qwen3-VL checkpoint, vision tower");
  layers_ = std::make_unique<CpuLayers>();
  tower_ = std::make_unique<Qwen3VLVisionTower>(config_.vision, *layers_, vision_weights());
  VLM_LOG_INFO("loaded Qwen3-VL: vision {} blocks width {}, DeepStack after blocks [{}], image/video ids {}/{}",
               config_.vision.depth, config_.vision.hidden_size, fmt::join(config_.vision.deepstack_visual_indexes, ", "),
               config_.image_token_id, config_.video_token_id);
}

Qwen3VLModel::~Qwen3VLModel() = default;

int64_t Qwen3VLModel::media_tokens(const MediaPixels& item, int k) const {
  const auto& v = config_.vision;
  return qwen2vl_item_tokens(item, k, v.patch_size, v.temporal_patch_size, v.spatial_merge_size, v.patch_dim());
}

int64_t Qwen3VLModel::tokens_per_frame(const MediaPixels& item) const {
  const int m = config_.vision.spatial_merge_size;
  return static_cast<int64_t>(item.grid_thw[1]) * item.grid_thw[2] / (m * m);
}

void Qwen3VLModel::encode(const float* pixels, std::span<const std::array<int32_t, 3>> grids, float* out) const {
  const Qwen3VLVisionLayout lay = qwen3_vl_vision_layout(config_.vision, grids);
  const int64_t m2 = int64_t{config_.vision.spatial_merge_size} * config_.vision.spatial_merge_size;
  const int64_t U = lay.num_patches / m2, C = config_.vision.out_hidden_size, planes = embedding_planes();
  std::vector<float> stacked(static_cast<size_t>(planes * U * C));  // [(1 + K) U, C]: plane after plane
  const ActivationPlan plan = tower_->plan(lay);
  CpuStep step(plan, lay.num_patches);
  // The tower reads the pixels only (Act's pointer is not const).
  tower_->forward(step, Act{const_cast<float*>(pixels), lay.num_patches, config_.vision.patch_dim(), DType::F32}, lay,
                  Act{stacked.data(), planes * U, C, DType::F32});
  for (int64_t u = 0; u < U; ++u)  // -> [U, (1 + K) C]: each row its planes side by side
    for (int64_t p = 0; p < planes; ++p)
      std::copy_n(stacked.data() + (p * U + u) * C, C, out + (u * planes + p) * C);
}

void Qwen3VLModel::encode_media(std::span<const MediaPixels* const> items, float* out) const {
  std::vector<std::array<int32_t, 3>> grids;
  size_t total = 0;
  bool frames8 = false;
  for (const MediaPixels* it : items) {
    grids.push_back(it->grid_thw);
    total += it->data.size();
    frames8 = frames8 || it->is_frames8();
  }
  if (items.size() == 1 && !frames8) return encode(items[0]->data.data(), grids, out);
  std::vector<float> pixels;  // [sum P, K]; a Frames8 item's rows made here (the CPU reference)
  pixels.reserve(total);
  for (const MediaPixels* it : items) {
    if (it->is_frames8()) {
      const std::vector<float> rows = qwen2vl_frames_rows(*it, 0, it->grid_thw[0]);
      pixels.insert(pixels.end(), rows.begin(), rows.end());
    } else {
      pixels.insert(pixels.end(), it->data.begin(), it->data.end());
    }
  }
  encode(pixels.data(), grids, out);
}

std::optional<MropePositions> Qwen3VLModel::mrope_positions(std::span<const int32_t> ids,
                                                            std::span<const MediaPixels> items) const {
  std::vector<std::array<int32_t, 3>> image_grids, video_grids;
  for (const MediaPixels& it : items) (it.modality == Modality::Video ? video_grids : image_grids).push_back(it.grid_thw);
  return positions(ids, image_grids, video_grids);
}

MropePositions Qwen3VLModel::positions(std::span<const int32_t> ids, std::span<const std::array<int32_t, 3>> image_grids,
                                       std::span<const std::array<int32_t, 3>> video_grids) const {
  std::vector<std::array<int32_t, 3>> groups;  // each video's t groups as grids (1, h, w)
  for (const auto& g : video_grids)
    for (int32_t t = 0; t < g[0]; ++t) groups.push_back({1, g[1], g[2]});
  MropeInput in{config_.image_token_id, config_.video_token_id, config_.vision.spatial_merge_size, image_grids, groups,
                {}};
  return compute_mrope_positions(ids, in);
}

std::vector<MediaPixels> Qwen3VLModel::split_video(const MediaPixels& video) const {
  return qwen3vl_split_video(video, config_.vision.temporal_patch_size);
}

}  // namespace vlm
