// Qwen3-VL's configuration (model/families/qwen3_vl_config.h). Field names and defaults restated
// from transformers 5.17's configuration_qwen3_vl.py and the rope handling of modeling_qwen3_vl.py
// (Qwen3VLTextRotaryEmbedding).
#include "model/families/qwen3_vl_config.h"

#include <cmath>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/decoder/json_file.h"

namespace vlm {

using nlohmann::json;

namespace {

// j[key] as a positive integer into dst when present; throws naming the field otherwise.
template <typename T>
void read_positive(const json& j, const char* key, T& dst, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return;
  if (!j[key].is_number_integer() || j[key].get<int64_t>() <= 0)
    throw LoadError(where + ": " + key + " must be a positive integer, got " + j[key].dump());
  dst = static_cast<T>(j[key].get<int64_t>());
}

}  // namespace

int64_t Qwen3VLVisionConfig::grid_side() const {
  return static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(num_position_embeddings))));
}

Qwen3VLVisionConfig Qwen3VLVisionConfig::from_json(const json& j, const std::string& source) {
  const std::string where = source + ": vision_config";
  if (!j.is_object()) throw LoadError(where + " is not a JSON object");
  Qwen3VLVisionConfig c;
  read_positive(j, "depth", c.depth, where);
  read_positive(j, "hidden_size", c.hidden_size, where);
  read_positive(j, "intermediate_size", c.intermediate_size, where);
  read_positive(j, "num_heads", c.num_heads, where);
  read_positive(j, "out_hidden_size", c.out_hidden_size, where);
  read_positive(j, "num_position_embeddings", c.num_position_embeddings, where);
  read_positive(j, "patch_size", c.patch_size, where);
  read_positive(j, "temporal_patch_size", c.temporal_patch_size, where);
  read_positive(j, "spatial_merge_size", c.spatial_merge_size, where);
  int64_t in_channels = 3;
  read_positive(j, "in_channels", in_channels, where);
  if (in_channels != 3) throw LoadError(where + fmt::format(": in_channels {} is not supported (only 3)", in_channels));
  const json act = j.value("hidden_act", json("gelu_pytorch_tanh"));
  if (!act.is_string() || act.get<std::string>() != "gelu_pytorch_tanh")
    throw LoadError(where + ": unsupported hidden_act " + act.dump() + " (supported: gelu_pytorch_tanh)");
  if (c.hidden_size % c.num_heads != 0 || c.head_dim() % 4 != 0)
    throw LoadError(where + fmt::format(": hidden_size {} over num_heads {} must give heads of a multiple of 4 dims "
                                        "(the 2-D rope)",
                                        c.hidden_size, c.num_heads));
  const int64_t n = c.grid_side();
  if (n * n != c.num_position_embeddings)
    throw LoadError(where + fmt::format(": num_position_embeddings {} is not a perfect square (the position table is "
                                        "an N x N grid)",
                                        c.num_position_embeddings));
  if (j.contains("deepstack_visual_indexes") && !j["deepstack_visual_indexes"].is_null()) {
    const json& d = j["deepstack_visual_indexes"];
    if (!d.is_array()) throw LoadError(where + ": deepstack_visual_indexes must be a list, got " + d.dump());
    c.deepstack_visual_indexes.clear();
    std::set<int64_t> seen;
    for (const json& e : d) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= c.depth || !seen.insert(e.get<int64_t>()).second)
        throw LoadError(where + fmt::format(": deepstack_visual_indexes entry {} must be a distinct block index in "
                                            "[0, depth={})",
                                            e.dump(), c.depth));
      c.deepstack_visual_indexes.push_back(e.get<int>());
    }
  } else {
    for (int i : c.deepstack_visual_indexes)
      if (i >= c.depth)
        throw LoadError(where + fmt::format(": the default deepstack_visual_indexes [8, 16, 24] need depth > 24, depth "
                                            "is {}: list them",
                                            c.depth));
  }
  return c;
}

Qwen3VLConfig Qwen3VLConfig::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) throw LoadError(source + ": not a JSON object");
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    arch = j["architectures"][0].get<std::string>();
  const std::string model_type = j.value("model_type", std::string());
  const bool moe = arch == "Qwen3VLMoeForConditionalGeneration" || (arch.empty() && model_type == "qwen3_vl_moe");
  if (!(moe || arch == "Qwen3VLForConditionalGeneration" || (arch.empty() && model_type == "qwen3_vl")))
    throw LoadError(source + ": architecture '" + arch + "' (model_type '" + model_type + "') is not Qwen3-VL");
  if (!j.contains("text_config") || !j["text_config"].is_object())
    throw LoadError(source + ": text_config is missing (Qwen3-VL keeps the decoder's fields there)");
  json t = j["text_config"];
  if (!t.contains("tie_word_embeddings") && j.contains("tie_word_embeddings"))
    t["tie_word_embeddings"] = j["tie_word_embeddings"];
  // The rope dict, 5.x (rope_parameters) or 4.57 (rope_scaling + rope_theta): transformers'
  // defaults filled in, and mrope_interleaved taken out (ModelConfig refuses it for plain text
  // models; Qwen3-VL always interleaves, set below).
  const char* rope_key = t.contains("rope_parameters") && t["rope_parameters"].is_object() ? "rope_parameters"
                         : t.contains("rope_scaling") && t["rope_scaling"].is_object()    ? "rope_scaling"
                                                                                           : "rope_parameters";
  json& rope = t[rope_key];
  if (!rope.is_object()) rope = json::object();
  if (rope.contains("mrope_interleaved") && !rope["mrope_interleaved"].is_boolean())
    throw LoadError(source + " (text_config): " + rope_key + ".mrope_interleaved must be a boolean, got " +
                    rope["mrope_interleaved"].dump());
  rope.erase("mrope_interleaved");
  if (!rope.contains("mrope_section")) rope["mrope_section"] = json::array({24, 20, 20});
  if (!rope["mrope_section"].is_array())
    throw LoadError(source + " (text_config): " + rope_key + ".mrope_section must be a list of 3 integers, got " +
                    rope["mrope_section"].dump());
  if (!rope.contains("rope_theta") && !t.contains("rope_theta")) rope["rope_theta"] = 500000.0;
  t["architectures"] = json::array({moe ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM"});
  t["model_type"] = moe ? "qwen3_moe" : "qwen3";
  // Qwen3VLMoeTextTopKRouter always renormalises the top-k weights (norm_topk_prob is not one of
  // Qwen3VLMoeTextConfig's fields: transformers 5.17 ignores whatever the file says).
  if (moe) {
    t["norm_topk_prob"] = true;
    // Qwen3VLMoeTextConfig's defaults where the file leaves a field out (they are not Qwen3MoeConfig's).
    if (!t.contains("num_experts") && !t.contains("num_local_experts")) t["num_experts"] = 60;
    for (const auto& [key, value] : {std::pair<const char*, int64_t>{"num_experts_per_tok", 4},
                                     {"moe_intermediate_size", 1408},
                                     {"intermediate_size", 5632},
                                     {"decoder_sparse_step", 1}})
      if (!t.contains(key) || t[key].is_null()) t[key] = value;
  }
  Qwen3VLConfig c;
  c.text = ModelConfig::from_json(t, source + " (text_config)");
  c.text.rope.mrope_interleaved = true;
  c.text.moe.fused_transposed_when_ambiguous = moe;  // released Qwen3-VL-MoE experts: [E, C, 2I], [E, I, C]
  if (c.text.rope.type != RopeType::Default)
    throw LoadError(source + " (text_config): " + rope_key + ".rope_type '" + rope_type_name(c.text.rope.type) +
                    "' is not implemented for Qwen3-VL's interleaved M-RoPE (only 'default')");
  c.vision = Qwen3VLVisionConfig::from_json(j.contains("vision_config") ? j["vision_config"] : json::object(), source);
  if (c.vision.out_hidden_size != c.text.hidden_size)
    throw LoadError(source + fmt::format(": vision_config.out_hidden_size {} is not text_config.hidden_size {}",
                                         c.vision.out_hidden_size, c.text.hidden_size));
  c.text.deepstack_layers = c.vision.num_deepstack();
  if (c.text.deepstack_layers > c.text.num_layers)
    throw LoadError(source + fmt::format(": vision_config.deepstack_visual_indexes has {} entries, and the decoder has "
                                         "only {} layers to add them after",
                                         c.text.deepstack_layers, c.text.num_layers));
  auto id = [&](const char* key, int32_t& dst) {
    if (!j.contains(key) || j[key].is_null()) return;
    if (!j[key].is_number_integer() || j[key].get<int64_t>() < 0 || j[key].get<int64_t>() >= c.text.vocab_size)
      throw LoadError(source + fmt::format(": {} must be a token id in [0, vocab_size={}), got {}", key,
                                           c.text.vocab_size, j[key].dump()));
    dst = j[key].get<int32_t>();
  };
  id("image_token_id", c.image_token_id);
  id("video_token_id", c.video_token_id);
  id("vision_start_token_id", c.vision_start_token_id);
  id("vision_end_token_id", c.vision_end_token_id);
  return c;
}

Qwen3VLConfig Qwen3VLConfig::load(const std::string& model_dir) {
  return parse_json_file(model_dir + "/config.json", from_json);
}

}  // namespace vlm
