#include "model/families/llava_onevision.h"

#include "model/arch/onevision_wiring.h"
#include "model/layers/cpu/cpu_layers.h"
#include "model/layers/cpu/cpu_step.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "kernels/core/log.h"
#include "kernels/ops/vision_ops.h"
#include "model/decoder/json_file.h"

namespace vlm {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& what) { throw LoadError(source + ": " + what); }

[[noreturn]] void bad_item(int k, const std::string& why) {
  throw RequestError(400, "invalid_request_error", fmt::format("media item {}: {}", k, why), "messages");
}

}  // namespace

LlavaOnevisionConfig LlavaOnevisionConfig::from_json(const json& j, const std::string& source) {
  LlavaOnevisionConfig c;
  json patched = j;
  // LlavaOnevisionConfig's defaults where LlavaConfig's differ.
  if (!patched.contains("vision_feature_select_strategy")) patched["vision_feature_select_strategy"] = "full";
  if (!patched.contains("vision_feature_layer")) patched["vision_feature_layer"] = -1;
  if (!patched.contains("image_token_id") && !patched.contains("image_token_index")) patched["image_token_id"] = 151646;
  // A tie flag written only at the top level (the composite config) holds for the text model.
  if (j.contains("tie_word_embeddings") && patched.contains("text_config") && patched["text_config"].is_object() &&
      !patched["text_config"].contains("tie_word_embeddings"))
    patched["text_config"]["tie_word_embeddings"] = j["tie_word_embeddings"];
  if (patched.contains("vision_config") && patched["vision_config"].is_object() &&
      !patched["vision_config"].contains("model_type"))
    patched["vision_config"]["model_type"] = "siglip_vision_model";
  c.llava = LlavaConfig::from_json(patched, source);
  for (const char* key : {"video_token_id", "video_token_index"})
    if (j.contains(key) && j[key].is_number_integer()) {
      c.video_token_id = j[key].get<int32_t>();
      break;
    }
  const int S = static_cast<int>(c.llava.vision.image_size);
  if (!j.contains("image_grid_pinpoints") || !j["image_grid_pinpoints"].is_array() || j["image_grid_pinpoints"].empty())
    fail(source, "missing image_grid_pinpoints");
  for (const json& p : j["image_grid_pinpoints"]) {
    if (!p.is_array() || p.size() != 2 || !p[0].is_number_integer() || !p[1].is_number_integer())
      fail(source, "image_grid_pinpoints entries must be [height, width]");
    const Resolution r{p[0].get<int>(), p[1].get<int>()};
    if (r.height <= 0 || r.width <= 0 || r.height % S != 0 || r.width % S != 0)
      fail(source, fmt::format("grid pinpoint {}x{} is not a positive multiple of the tile size {}", r.height,
                               r.width, S));
    c.grid_pinpoints.push_back(r);
  }
  const std::string ar = j.value("vision_aspect_ratio", std::string("anyres_max_9"));
  const std::string prefix = "anyres_max_";
  try {
    if (ar.rfind(prefix, 0) != 0) throw std::invalid_argument(ar);
    c.max_num_patches = std::stoi(ar.substr(prefix.size()));
  } catch (const std::exception&) {
    fail(source, "unsupported vision_aspect_ratio '" + ar + "' (anyres_max_N)");
  }
  if (c.max_num_patches <= 0) fail(source, "vision_aspect_ratio " + ar + " must allow at least one patch");
  if (c.llava.drop_cls && c.llava.vision.siglip)
    fail(source, "vision_feature_select_strategy 'default' drops a class token the SigLIP tower does not have");
  return c;
}

LlavaOnevisionConfig LlavaOnevisionConfig::load(const std::string& model_dir) {
  return parse_json_file(model_dir + "/config.json", from_json);
}

std::unique_ptr<LlavaOnevisionModel> LlavaOnevisionModel::load(const std::string& model_dir,
                                                               const WeightLoadOptions& options) {
  LlavaOnevisionConfig config = LlavaOnevisionConfig::load(model_dir);
  auto base = std::make_unique<LlavaModel>(config.llava, WeightStore::open(model_dir, options));
  return std::make_unique<LlavaOnevisionModel>(std::move(config), std::move(base));
}

LlavaOnevisionModel::LlavaOnevisionModel(LlavaOnevisionConfig config, std::unique_ptr<LlavaModel> base)
    : config_(std::move(config)), base_(std::move(base)) {
  const WeightStore& w = base_->weights();
  const int64_t C = config_.llava.text.hidden_size;
  std::string name;
  for (const char* n : {"model.image_newline", "image_newline"})
    if (w.has(n)) name = n;
  newline_ = name;
  if (name.empty()) throw LoadError("LLaVA-OneVision checkpoint: no image_newline (looked for model.image_newline, image_newline)");
  backend_ = std::make_unique<CpuLayers>();
  wiring_ = std::make_unique<OnevisionWiring>(base_->wiring(), *backend_, WeightSource(w, ""), WeightRef{name, {C}});
  VLM_LOG_INFO("loaded LLaVA-OneVision: {} tiles {}px ({} features each), {} pinpoints, anyres_max_{}, "
               "image/video ids {}/{}",
               config_.llava.vision.siglip ? "SigLIP" : "CLIP", tile_size(), grid() * grid(),
               config_.grid_pinpoints.size(), config_.max_num_patches, image_token_id(), video_token_id());
}

LlavaOnevisionModel::~LlavaOnevisionModel() = default;

VisionBinding LlavaOnevisionModel::vision_binding() const {
  const int64_t C = config_.llava.text.hidden_size;
  return OnevisionVisionBinding{OnevisionSpec{base_->wiring().spec(), config_.grid_pinpoints, config_.max_num_patches},
                                base_->tower_weights(), base_->projector_weights(),
                                WeightSource(base_->weights(), ""), WeightRef{newline_, {C}}};
}

AnyresLayout LlavaOnevisionModel::image_layout(Resolution image) const {
  return anyres_layout(image, config_.grid_pinpoints, tile_size(), grid(), config_.max_num_patches);
}

int64_t LlavaOnevisionModel::media_tokens(const MediaPixels& item, int k) const {
  const int64_t tile = 3LL * tile_size() * tile_size();
  if (item.is_frames8()) bad_item(k, "8-bit frames (the Qwen2-VL family's form); this model takes preprocessed tiles");
  if (item.data.empty() || item.data.size() % static_cast<size_t>(tile) != 0)
    bad_item(k, fmt::format("{} values are not whole 3x{}x{} tiles", item.data.size(), tile_size(), tile_size()));
  const int64_t n = static_cast<int64_t>(item.data.size()) / tile;
  if (item.modality == Modality::Video) return n * pooled_frame_tokens(grid()) + 1;
  if (item.modality != Modality::Image) bad_item(k, "not an image or a video");
  if (item.height <= 0 || item.width <= 0) bad_item(k, "an image without its original size");
  const AnyresLayout a = image_layout({item.height, item.width});
  if (a.num_tiles() != n)
    bad_item(k, fmt::format("a {}x{} image has {} tiles (base included); the AnyRes grid {}x{} needs {}", item.height,
                            item.width, n, a.tile_rows, a.tile_cols, a.num_tiles()));
  return a.num_tokens();
}

int64_t LlavaOnevisionModel::tokens_per_frame(const MediaPixels& item) const {
  return item.modality == Modality::Video ? pooled_frame_tokens(grid()) : media_tokens(item, 0);
}

void LlavaOnevisionModel::encode_item(const MediaPixels& item, float* out) const {
  const int64_t S = tile_size(), C = config_.llava.text.hidden_size;
  const int64_t N = static_cast<int64_t>(item.data.size()) / (3 * S * S);
  const Act px{const_cast<float*>(item.data.data()), N, 3 * S * S, DType::F32};
  const int64_t rows = N * config_.llava.vision.num_positions();
  if (item.modality == Modality::Video) {
    const ActivationPlan plan = wiring_->plan(N, nullptr);
    CpuStep step(plan, rows);
    const int64_t p = (grid() + 1) / 2;
    wiring_->video(step, px, Act{out, N * p * p + 1, C, DType::F32});
    return;
  }
  const AnyresLayout a = image_layout({item.height, item.width});
  const ActivationPlan plan = wiring_->plan(N, &a);
  CpuStep step(plan, rows);
  wiring_->image(step, px, a, Act{out, a.num_tokens(), C, DType::F32});
}

void LlavaOnevisionModel::encode_media(std::span<const MediaPixels* const> items, float* out) const {
  const int64_t C = config_.llava.text.hidden_size;
  for (size_t k = 0; k < items.size(); ++k) {
    encode_item(*items[k], out);
    out += media_tokens(*items[k], static_cast<int>(k)) * C;
  }
}

}  // namespace vlm
