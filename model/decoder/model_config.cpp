#include "model/decoder/model_config.h"
#include "model/decoder/json_file.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/core/check.h"

namespace vlm {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw LoadError(source + ": " + what);
}

int64_t get_int(const json& j, const char* key, const std::string& source) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer())
    fail(source, std::string("missing or non-integer field '") + key + "'");
  int64_t v = it->get<int64_t>();
  if (v <= 0) fail(source, std::string("field '") + key + "' must be positive, got " + std::to_string(v));
  return v;
}

template <typename T>
T get_or(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return it->get<T>();
}

RopeType parse_rope_type(const std::string& name, const std::string& source) {
  if (name == "default") return RopeType::Default;
  if (name == "linear") return RopeType::Linear;
  if (name == "llama3") return RopeType::Llama3;
  if (name == "yarn") return RopeType::Yarn;
  fail(source, "unsupported rope type '" + name + "' (supported: default, linear, llama3, yarn)");
}

RopeConfig parse_rope(const json& j, const ModelConfig& c, const std::string& source) {
  // transformers >= 5 keeps everything in rope_parameters; older configs split it.
  json params = json::object();
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) params = j["rope_parameters"];
  else if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) params = j["rope_scaling"];

  RopeConfig r;
  r.head_dim = static_cast<int>(c.head_dim);
  double partial = get_or<double>(params, "partial_rotary_factor",
                                  get_or<double>(j, "partial_rotary_factor", 1.0));
  r.rotary_dim = static_cast<int>(static_cast<double>(c.head_dim) * partial);
  r.theta = get_or<double>(params, "rope_theta", get_or<double>(j, "rope_theta", 10000.0));
  std::string type = get_or<std::string>(params, "rope_type", get_or<std::string>(params, "type", "default"));
  if (params.contains("mrope_section") && params["mrope_section"].is_array()) {
    r.mrope_section = params["mrope_section"].get<std::vector<int>>();
    int sum = 0;
    for (int s : r.mrope_section) sum += s;
    if (r.mrope_section.size() != 3 || sum * 2 != r.rotary_dim)
      fail(source, fmt::format("mrope_section must be 3 sections summing to rotary_dim / 2 = {}", r.rotary_dim / 2));
    if (type == "mrope") type = "default";  // legacy Qwen2-VL configs: {"type": "mrope", ...}
    // Qwen3-VL interleaves the sections over the frequencies (THWTHW...): not the contiguous
    // layout cos_sin_table_mrope computes.
    if (get_or<bool>(params, "mrope_interleaved", false))
      fail(source, "mrope_interleaved=true (interleaved M-RoPE, Qwen3-VL) is not supported yet");
  }
  r.type = parse_rope_type(type, source);
  if (r.type == RopeType::Default) return r;

  int64_t original = get_or<int64_t>(params, "original_max_position_embeddings", c.max_position_embeddings);
  if (j.contains("original_max_position_embeddings") && j["original_max_position_embeddings"].is_number())
    original = j["original_max_position_embeddings"].get<int64_t>();
  r.original_max_position = original;

  auto factor = params.find("factor");
  bool has_factor = factor != params.end() && factor->is_number();
  if (r.type == RopeType::Yarn && !has_factor) {
    r.factor = static_cast<double>(c.max_position_embeddings) / static_cast<double>(original);
  } else {
    if (!has_factor) fail(source, "rope type '" + type + "' needs a numeric 'factor'");
    r.factor = factor->get<double>();
  }
  if (r.factor <= 0) fail(source, "rope factor must be positive");
  if (r.type == RopeType::Llama3) {
    r.low_freq_factor = get_or<double>(params, "low_freq_factor", 1.0);
    r.high_freq_factor = get_or<double>(params, "high_freq_factor", 4.0);
    if (r.high_freq_factor <= r.low_freq_factor)
      fail(source, "llama3 rope needs high_freq_factor > low_freq_factor");
  }
  if (r.type == RopeType::Yarn) {
    // transformers: `beta_fast or 32`, `beta_slow or 1` (a 0 means the default too).
    double bf = get_or<double>(params, "beta_fast", 0.0), bs = get_or<double>(params, "beta_slow", 0.0);
    r.beta_fast = bf != 0.0 ? bf : 32.0;
    r.beta_slow = bs != 0.0 ? bs : 1.0;
    r.attention_factor = get_or<double>(params, "attention_factor", 0.0);
    r.mscale = get_or<double>(params, "mscale", 0.0);
    r.mscale_all_dim = get_or<double>(params, "mscale_all_dim", 0.0);
    r.truncate = get_or<bool>(params, "truncate", true);
  }
  return r;
}

// Qwen3MoeConfig's fields (transformers 5.17; num_experts is also read as num_local_experts, its
// attribute_map name), and the refusal of MoE layouts whose math differs from Qwen3MoeSparseMoeBlock.
MoeConfig parse_moe(const json& j, int64_t num_layers, const std::string& source) {
  auto positive = [&](const char* key) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null() || !it->is_number()) return 0.0;
    return it->get<double>();
  };
  for (const char* key : {"shared_expert_intermediate_size", "n_shared_experts", "num_shared_experts"})
    if (positive(key) > 0)
      fail(source, fmt::format("{} = {}: shared experts (Qwen2-MoE / DeepSeek layout) are not supported; "
                               "Qwen3MoeForCausalLM has none", key, j[key].dump()));
  const std::string scoring = get_or<std::string>(j, "scoring_func", "softmax");
  if (scoring != "softmax")
    fail(source, "scoring_func '" + scoring + "': only the softmax router (Qwen3-MoE) is supported");
  for (const char* key : {"router_type", "topk_method"})
    if (j.contains(key) && !j[key].is_null() && !(j[key].is_string() && j[key].get<std::string>() == "greedy"))
      fail(source, fmt::format("{} = {}: only the plain softmax top-k router (Qwen3-MoE) is supported", key,
                               j[key].dump()));
  for (const char* key : {"n_group", "topk_group"})
    if (positive(key) > 1)
      fail(source, fmt::format("{} = {}: group-limited expert routing is not supported", key, j[key].dump()));
  if (j.contains("routed_scaling_factor") && !j["routed_scaling_factor"].is_null() &&
      get_or<double>(j, "routed_scaling_factor", 1.0) != 1.0)
    fail(source, "routed_scaling_factor = " + j["routed_scaling_factor"].dump() + ": scaled expert weights are not "
                 "supported");
  if (positive("first_k_dense_replace") > 0 || (j.contains("moe_layer_freq") && positive("moe_layer_freq") != 1))
    fail(source, "first_k_dense_replace / moe_layer_freq (DeepSeek's layer schedule) are not supported; Qwen3-MoE "
                 "uses decoder_sparse_step and mlp_only_layers");
  MoeConfig m;
  const char* experts_key = j.contains("num_experts") && !j["num_experts"].is_null() ? "num_experts" : "num_local_experts";
  m.num_experts = get_int(j, experts_key, source);
  m.top_k = get_int(j, "num_experts_per_tok", source);
  if (m.top_k > m.num_experts)
    fail(source, fmt::format("num_experts_per_tok {} exceeds {} {}", m.top_k, experts_key, m.num_experts));
  m.intermediate_size = get_int(j, "moe_intermediate_size", source);
  m.norm_topk_prob = get_or<bool>(j, "norm_topk_prob", false);
  m.decoder_sparse_step = j.contains("decoder_sparse_step") && !j["decoder_sparse_step"].is_null()
                              ? get_int(j, "decoder_sparse_step", source)
                              : 1;
  if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
    if (!j["mlp_only_layers"].is_array()) fail(source, "mlp_only_layers must be a list of layer indices");
    for (const auto& l : j["mlp_only_layers"]) {
      if (!l.is_number_integer() || l.get<int64_t>() < 0 || l.get<int64_t>() >= num_layers)
        fail(source, fmt::format("mlp_only_layers entry {} is not a layer index in [0, {})", l.dump(), num_layers));
      m.mlp_only_layers.push_back(l.get<int64_t>());
    }
  }
  return m;
}

}  // namespace

bool MoeConfig::is_moe_layer(int64_t layer) const {
  if (num_experts <= 0 || decoder_sparse_step <= 0) return false;
  for (int64_t l : mlp_only_layers)
    if (l == layer) return false;
  return (layer + 1) % decoder_sparse_step == 0;
}

ModelConfig ModelConfig::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) fail(source, "not a JSON object");
  ModelConfig c;
  std::string model_type = get_or<std::string>(j, "model_type", "");
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty())
    c.architecture = j["architectures"][0].get<std::string>();
  if (c.architecture == "LlamaForCausalLM" || (c.architecture.empty() && model_type == "llama")) {
    c.family = DecoderFamily::Llama;
  } else if (c.architecture == "Qwen2ForCausalLM" || (c.architecture.empty() && model_type == "qwen2")) {
    c.family = DecoderFamily::Qwen2;
  } else if (c.architecture == "Qwen3ForCausalLM" || (c.architecture.empty() && model_type == "qwen3")) {
    c.family = DecoderFamily::Qwen3;
  } else if (c.architecture == "Qwen3MoeForCausalLM" || (c.architecture.empty() && model_type == "qwen3_moe")) {
    c.family = DecoderFamily::Qwen3;  // Qwen3's attention; the MLPs from `moe` below
    if (c.architecture.empty()) c.architecture = "Qwen3MoeForCausalLM";
  } else {
    fail(source, "unsupported architecture '" + c.architecture + "' (model_type '" + model_type +
                     "'); supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM");
  }
  c.vocab_size = get_int(j, "vocab_size", source);
  c.hidden_size = get_int(j, "hidden_size", source);
  c.num_layers = get_int(j, "num_hidden_layers", source);
  if (c.architecture == "Qwen3MoeForCausalLM") {
    c.moe = parse_moe(j, c.num_layers, source);
    // Only dense layers read it; transformers' default when the file omits it.
    c.intermediate_size = j.contains("intermediate_size") ? get_int(j, "intermediate_size", source) : 6144;
  } else {
    c.intermediate_size = get_int(j, "intermediate_size", source);
  }
  c.num_heads = get_int(j, "num_attention_heads", source);
  c.num_kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                       ? get_int(j, "num_key_value_heads", source)
                       : c.num_heads;
  c.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? get_int(j, "head_dim", source)
                                                                   : c.hidden_size / c.num_heads;
  if (c.num_heads % c.num_kv_heads != 0)
    fail(source, fmt::format("num_attention_heads {} is not a multiple of num_key_value_heads {}",
                             c.num_heads, c.num_kv_heads));
  c.max_position_embeddings = get_or<int64_t>(j, "max_position_embeddings", 4096);
  c.rms_norm_eps = get_or<double>(j, "rms_norm_eps", 1e-6);
  c.tie_word_embeddings = get_or<bool>(j, "tie_word_embeddings", false);
  std::string act = get_or<std::string>(j, "hidden_act", "silu");
  if (act != "silu") fail(source, "unsupported hidden_act '" + act + "' (supported: silu)");
  if (c.family == DecoderFamily::Qwen2 || c.family == DecoderFamily::Qwen3) {
    // Qwen2: q/k/v always biased, o never. Qwen3: all four follow attention_bias (Qwen3Attention),
    // the MLP has none, q and k have a per-head RMSNorm.
    if (c.family == DecoderFamily::Qwen2) {
      c.qkv_bias = true;
    } else {
      c.qkv_bias = c.o_bias = get_or<bool>(j, "attention_bias", false);
      c.qk_norm = true;
    }
    if (get_or<bool>(j, "use_sliding_window", false))
      fail(source, "use_sliding_window=true is not supported");
    // transformers 5 writes layer_types; any layer other than full attention changes the math.
    if (j.contains("layer_types") && j["layer_types"].is_array())
      for (const auto& t : j["layer_types"])
        if (!t.is_string() || t.get<std::string>() != "full_attention")
          fail(source, "layer_types entry " + t.dump() + " is not supported (only full_attention)");
  } else {
    c.qkv_bias = c.o_bias = get_or<bool>(j, "attention_bias", false);
    c.mlp_bias = get_or<bool>(j, "mlp_bias", false);
  }
  c.rope = parse_rope(j, c, source);
  std::string dtype = get_or<std::string>(j, "dtype", get_or<std::string>(j, "torch_dtype", "bfloat16"));
  if (!parse_float_dtype_name(dtype, &c.dtype)) fail(source, "unknown dtype '" + dtype + "'");
  c.bos_token_id = get_or<int64_t>(j, "bos_token_id", -1);
  if (j.contains("eos_token_id")) {
    const json& e = j["eos_token_id"];
    if (e.is_number_integer()) c.eos_token_ids.push_back(e.get<int64_t>());
    else if (e.is_array())
      for (const auto& x : e) c.eos_token_ids.push_back(x.get<int64_t>());
  }
  return c;
}

ModelConfig ModelConfig::load(const std::string& model_dir) {
  return parse_json_file(model_dir + "/config.json", from_json);
}

}  // namespace vlm
