#include "model/families/qwen2_vl.h"
#include "model/media/qwen2vl_frames.h"
#include "model/decoder/json_file.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "kernels/core/log.h"

namespace vlm {

using nlohmann::json;

Qwen2VLConfig Qwen2VLConfig::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) throw LoadError(source + ": not a JSON object");
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty())
    arch = j["architectures"][0].get<std::string>();
  const std::string model_type = j.value("model_type", std::string());
  bool qwen25;
  if (arch == "Qwen2VLForConditionalGeneration" || (arch.empty() && model_type == "qwen2_vl")) qwen25 = false;
  else if (arch == "Qwen2_5_VLForConditionalGeneration" || (arch.empty() && model_type == "qwen2_5_vl")) qwen25 = true;
  else throw LoadError(source + ": architecture '" + arch + "' is not Qwen2-VL or Qwen2.5-VL");
  Qwen2VLConfig c;
  // transformers 5: text_config; released checkpoints: text fields at the top level.
  json t = j.contains("text_config") && j["text_config"].is_object() ? j["text_config"] : j;
  for (const char* key : {"rope_scaling", "rope_parameters", "rope_theta", "dtype", "torch_dtype",
                          "tie_word_embeddings", "vocab_size", "hidden_size"})
    if (!t.contains(key) && j.contains(key)) t[key] = j[key];
  t["architectures"] = json::array({"Qwen2ForCausalLM"});
  t["model_type"] = "qwen2";
  c.text = ModelConfig::from_json(t, source + " (text_config)");
  if (c.text.rope.mrope_section.empty()) throw LoadError(source + ": text rope has no mrope_section");
  c.vision = Qwen2VisionConfig::from_json(
      j.contains("vision_config") && j["vision_config"].is_object() ? j["vision_config"] : json::object(), qwen25,
      source);
  if (c.vision.out_hidden_size != c.text.hidden_size)
    throw LoadError(source + fmt::format(": vision merger width {} is not the text hidden size {}",
                                         c.vision.out_hidden_size, c.text.hidden_size));
  auto id = [&](const char* key, int32_t& dst) {
    if (j.contains(key) && j[key].is_number_integer()) dst = j[key].get<int32_t>();
  };
  id("image_token_id", c.image_token_id);
  id("video_token_id", c.video_token_id);
  id("vision_start_token_id", c.vision_start_token_id);
  id("vision_end_token_id", c.vision_end_token_id);
  return c;
}

Qwen2VLConfig Qwen2VLConfig::load(const std::string& model_dir) {
  return parse_json_file(model_dir + "/config.json", from_json);
}

std::unique_ptr<Qwen2VLModel> Qwen2VLModel::load(const std::string& model_dir, const WeightLoadOptions& options) {
  return std::make_unique<Qwen2VLModel>(Qwen2VLConfig::load(model_dir), WeightStore::open(model_dir, options));
}

Qwen2VLModel::Qwen2VLModel(Qwen2VLConfig config, WeightStore weights)
    : config_(std::move(config)), weights_(std::move(weights)) {
  const WeightStore& w = weights_;
  DecoderWeightNames names;
  names.prefix = w.first_prefix({"model.language_model.", "model."}, "embed_tokens.weight",
                                "Qwen2-VL checkpoint, language model");
  names.lm_head = "lm_head.weight";
  decoder_ = std::make_unique<LlmDecoder>(config_.text, weights_, names);
  const WeightLookup lookup = [&w](const std::string& name, const Shape& shape) { return w.get(name, shape); };
  const std::string vp = w.first_prefix({"model.visual.", "visual."}, "patch_embed.proj.weight", "Qwen2-VL checkpoint, vision tower");
  vision_ = std::make_unique<Qwen2VisionEncoder>(config_.vision, lookup, vp);
  VLM_LOG_INFO("loaded {}: vision {} blocks width {}, image/video ids {}/{}",
               config_.vision.qwen25 ? "Qwen2.5-VL" : "Qwen2-VL", config_.vision.depth, config_.vision.hidden_size,
               config_.image_token_id, config_.video_token_id);
}

void Qwen2VLModel::encode(const float* pixels, std::span<const std::array<int32_t, 3>> grids, float* out) const {
  vision_->encode(pixels, grids, out);
}

int64_t Qwen2VLModel::media_tokens(const MediaPixels& item, int k) const {
  const Qwen2VisionConfig& v = config_.vision;
  return qwen2vl_item_tokens(item, k, v.patch_size, v.temporal_patch_size, v.spatial_merge_size, v.patch_dim());
}

int64_t Qwen2VLModel::tokens_per_frame(const MediaPixels& item) const {
  const int m = config_.vision.spatial_merge_size;
  return static_cast<int64_t>(item.grid_thw[1]) * item.grid_thw[2] / (m * m);
}

void Qwen2VLModel::encode_media(std::span<const MediaPixels* const> items, float* out) const {
  std::vector<std::array<int32_t, 3>> grids;
  size_t total = 0;
  bool frames8 = false;
  for (const MediaPixels* it : items) {
    grids.push_back(it->grid_thw);
    total += it->data.size();
    frames8 = frames8 || it->is_frames8();
  }
  if (items.size() == 1 && !frames8) {
    vision_->encode(items[0]->data.data(), grids, out);
    return;
  }
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
  vision_->encode(pixels.data(), grids, out);
}

std::optional<MropePositions> Qwen2VLModel::mrope_positions(std::span<const int32_t> ids,
                                                            std::span<const MediaPixels> items) const {
  std::vector<std::array<int32_t, 3>> image_grids, video_grids;
  std::vector<float> second_per_grid;
  for (const MediaPixels& it : items) {
    if (it.modality == Modality::Video) {
      video_grids.push_back(it.grid_thw);
      second_per_grid.push_back(it.second_per_grid);
    } else {
      image_grids.push_back(it.grid_thw);
    }
  }
  return positions(ids, image_grids, video_grids, second_per_grid);
}

MropePositions Qwen2VLModel::positions(std::span<const int32_t> ids, std::span<const std::array<int32_t, 3>> image_grids,
                                       std::span<const std::array<int32_t, 3>> video_grids,
                                       std::span<const float> second_per_grid) const {
  std::vector<int32_t> intervals;
  if (config_.vision.qwen25)
    for (size_t k = 0; k < video_grids.size(); ++k)
      intervals.push_back(qwen25_video_time_interval(config_.vision.tokens_per_second,
                                                     k < second_per_grid.size() ? second_per_grid[k] : 1.0f));
  MropeInput in{config_.image_token_id, config_.video_token_id, config_.vision.spatial_merge_size, image_grids,
                video_grids, intervals};
  return compute_mrope_positions(ids, in);
}

}  // namespace vlm
