#include "model/families/llava.h"
#include "model/decoder/json_file.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "kernels/core/log.h"
#include "model/arch/llava_wiring.h"
#include "model/layers/cpu/cpu_layers.h"
#include "model/layers/cpu/cpu_step.h"

namespace vlm {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw LoadError(source + ": " + what);
}

// Released LLaVA checkpoints write sparse sub-configs: fill LlamaConfig's defaults (transformers)
// for the fields ModelConfig requires.
json text_config_with_defaults(const json& top, const std::string& source) {
  json t = top.contains("text_config") && top["text_config"].is_object() ? top["text_config"] : json::object();
  const std::string type = t.value("model_type", std::string("llama"));
  t["model_type"] = type;
  if (type == "llama") {
    const std::pair<const char*, json> defaults[] = {
        {"vocab_size", 32000},       {"hidden_size", 4096},         {"intermediate_size", 11008},
        {"num_hidden_layers", 32},   {"num_attention_heads", 32},   {"max_position_embeddings", 2048},
        {"rms_norm_eps", 1e-6},      {"hidden_act", "silu"}};
    for (const auto& [key, value] : defaults)
      if (!t.contains(key) || t[key].is_null()) t[key] = value;
  }
  if (!t.contains("dtype") && !t.contains("torch_dtype")) {
    if (top.contains("dtype")) t["dtype"] = top["dtype"];
    else if (top.contains("torch_dtype")) t["torch_dtype"] = top["torch_dtype"];
  }
  (void)source;
  return t;
}

}  // namespace

LlavaConfig LlavaConfig::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) fail(source, "not a JSON object");
  LlavaConfig c;
  c.text = ModelConfig::from_json(text_config_with_defaults(j, source), source + " (text_config)");
  c.vision = ClipVisionConfig::from_json(
      j.contains("vision_config") && j["vision_config"].is_object() ? j["vision_config"] : json::object(),
      source);
  for (const char* key : {"image_token_id", "image_token_index"})
    if (j.contains(key) && j[key].is_number_integer()) {
      c.image_token_id = j[key].get<int32_t>();
      break;
    }
  const std::string act = j.value("projector_hidden_act", std::string("gelu"));
  if (act != "gelu") fail(source, "unsupported projector_hidden_act '" + act + "' (supported: gelu)");
  const std::string strategy = j.value("vision_feature_select_strategy", std::string("default"));
  if (strategy == "default") c.drop_cls = true;
  else if (strategy == "full") c.drop_cls = false;
  else fail(source, "unsupported vision_feature_select_strategy '" + strategy + "' (default, full)");
  c.projector_bias = j.value("multimodal_projector_bias", true);
  std::vector<int> raw;
  const json layer = j.contains("vision_feature_layer") ? j["vision_feature_layer"] : json(-2);
  if (layer.is_number_integer()) raw.push_back(layer.get<int>());
  else if (layer.is_array() && !layer.empty())
    for (const auto& x : layer) raw.push_back(x.get<int>());
  else fail(source, "vision_feature_layer must be an integer or a non-empty list");
  const int num_hidden = static_cast<int>(c.vision.num_layers) + 1;  // hidden_states entries
  for (int l : raw) {
    const int r = l < 0 ? num_hidden + l : l;
    if (r < 0 || r >= num_hidden)
      fail(source, fmt::format("vision_feature_layer {} is outside the {} hidden states", l, num_hidden));
    c.feature_layers.push_back(r);
  }
  return c;
}

LlavaConfig LlavaConfig::load(const std::string& model_dir) {
  return parse_json_file(model_dir + "/config.json", from_json);
}

std::unique_ptr<LlavaModel> LlavaModel::load(const std::string& model_dir, const WeightLoadOptions& options) {
  return std::make_unique<LlavaModel>(LlavaConfig::load(model_dir), WeightStore::open(model_dir, options));
}

LlavaModel::LlavaModel(LlavaConfig config, WeightStore weights)
    : config_(std::move(config)), weights_(std::move(weights)) {
  const WeightStore& w = weights_;
  auto first_present = [&](std::initializer_list<const char*> prefixes, const std::string& probe, const char* what) {
    return w.first_prefix(prefixes, probe, std::string("LLaVA checkpoint, ") + what);
  };
  DecoderWeightNames names;
  names.prefix = first_present({"model.language_model.", "language_model.model."}, "embed_tokens.weight",
                               "language model");
  names.lm_head = names.prefix == "model.language_model." ? "lm_head.weight" : "language_model.lm_head.weight";
  decoder_ = std::make_unique<LlmDecoder>(config_.text, weights_, names);

  const WeightLookup lookup = [&w](const std::string& name, const Shape& shape) { return w.get(name, shape); };
  const std::string vp = first_present({"model.vision_tower.vision_model.", "model.vision_tower.",
                                        "vision_tower.vision_model.", "vision_tower."},
                                       "embeddings.patch_embedding.weight", "vision tower");
  int deepest = 0;
  for (int l : config_.feature_layers) deepest = std::max(deepest, l);
  vision_ = std::make_unique<ClipVisionEncoder>(config_.vision, lookup, vp, deepest);
  const std::string pp = first_present({"model.multi_modal_projector.", "multi_modal_projector."},
                                       "linear_1.weight", "projector");
  tower_prefix_ = vp;
  projector_prefix_ = pp;
  projector_ = std::make_unique<LlavaProjector>(
      lookup, pp, config_.vision.hidden_size * static_cast<int64_t>(config_.feature_layers.size()),
      config_.text.hidden_size, config_.projector_bias);
  backend_ = std::make_unique<CpuLayers>();
  wiring_ = std::make_unique<LlavaVision>(
      LlavaVisionSpec{config_.vision, config_.feature_layers, config_.drop_cls, config_.text.hidden_size,
                      config_.projector_bias},
      *backend_, WeightSource(w, vp), WeightSource(w, pp));
  VLM_LOG_INFO("loaded LLaVA: vision {}x{} patch {} ({} of {} layers used), {} image tokens, id {}",
               config_.vision.image_size, config_.vision.image_size, config_.vision.patch_size, deepest,
               config_.vision.num_layers, tokens_per_image(), config_.image_token_id);
}

LlavaModel::~LlavaModel() = default;

VisionBinding LlavaModel::vision_binding() const {
  return LlavaVisionBinding{wiring_->spec(), tower_weights(), projector_weights()};
}

void LlavaModel::vision_features(const float* pixels, int64_t N, float* out) const {
  const ActivationPlan plan = wiring_->plan(N);
  CpuStep step(plan, N * config_.vision.num_positions());
  const int64_t S = image_size();
  wiring_->features(step, Act{const_cast<float*>(pixels), N, 3 * S * S, DType::F32},
                    Act{out, N * tokens_per_image(), wiring_->spec().features(), DType::F32});
}

void LlavaModel::encode_images(const float* pixels, int64_t N, float* out) const {
  const ActivationPlan plan = wiring_->plan(N);
  CpuStep step(plan, N * config_.vision.num_positions());
  const int64_t S = image_size();
  wiring_->forward(step, Act{const_cast<float*>(pixels), N, 3 * S * S, DType::F32},
                   Act{out, N * tokens_per_image(), config_.text.hidden_size, DType::F32});
}

int64_t LlavaModel::media_tokens(const MediaPixels& item, int k) const {
  const int S = image_size();
  if (item.modality != Modality::Image)
    throw RequestError(400, "invalid_request_error",
                       fmt::format("this model does not accept {} input", modality_name(item.modality)), "messages");
  if (item.is_frames8())  // the Qwen2-VL family's 8-bit form (model/media/media_pixels.h)
    throw RequestError(400, "invalid_request_error",
                       fmt::format("image {} is 8-bit frames; this model takes preprocessed pixel values", k), "messages");
  if (item.height != S || item.width != S || item.data.size() != static_cast<size_t>(3) * S * S)
    throw RequestError(400, "invalid_request_error",
                       fmt::format("image {} is {}x{} pixels ({} values); the model takes 3x{}x{}", k, item.height,
                                   item.width, item.data.size(), S, S),
                       "messages");
  return tokens_per_image();
}

void LlavaModel::encode_media(std::span<const MediaPixels* const> items, float* out) const {
  const int64_t S = image_size(), per_image = 3 * S * S, N = static_cast<int64_t>(items.size());
  std::vector<float> pixels(static_cast<size_t>(N * per_image));  // [N, 3, S, S]
  for (int64_t k = 0; k < N; ++k) {
    const MediaPixels& img = *items[static_cast<size_t>(k)];
    VLM_CHECK(static_cast<int64_t>(img.data.size()) == per_image && img.height == S && img.width == S,
              "image of {}x{} ({} values), the encoder takes 3x{}x{}", img.height, img.width, img.data.size(), S, S);
    std::copy(img.data.begin(), img.data.end(), pixels.begin() + k * per_image);
  }
  encode_images(pixels.data(), N, out);
}

MultimodalPrompt LlavaModel::build_prompt(std::span<const int32_t> ids, int32_t num_images) const {
  return expand_image_tokens(ids, config_.image_token_id, tokens_per_image(), num_images);
}

}  // namespace vlm
