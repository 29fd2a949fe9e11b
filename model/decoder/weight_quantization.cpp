#include "model/decoder/weight_quantization.h"

#include <filesystem>

#include "kernels/core/check.h"
#include "model/decoder/json_file.h"

namespace vlm {
namespace {

[[noreturn]] void refuse(const std::string& path, const std::string& what) {
  throw LoadError(path + ": quantization_config " + what +
                  " is not read (vlm-server reads FP8 E4M3 weights: quant_method 'fp8' with weight_block_size and "
                  "dynamic activations, or compressed-tensors per-channel FP8)");
}

std::string str_or(const nlohmann::json& j, const char* key, const std::string& fallback) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : fallback;
}

WeightQuantization parse_hf_fp8(const nlohmann::json& q, const std::string& path) {
  const std::string fmt = str_or(q, "fmt", "e4m3"), act = str_or(q, "activation_scheme", "dynamic");
  if (fmt != "e4m3") refuse(path, "fmt '" + fmt + "'");
  if (act != "dynamic") refuse(path, "activation_scheme '" + act + "'");
  if (!q.contains("weight_block_size") || q["weight_block_size"].is_null())
    refuse(path, "quant_method 'fp8' without weight_block_size (per-tensor scales)");
  const nlohmann::json& b = q["weight_block_size"];
  if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
      b[0].get<int64_t>() <= 0 || b[1].get<int64_t>() <= 0)
    refuse(path, "weight_block_size " + b.dump());
  WeightQuantization w;
  w.scales = Fp8Scales::Block;
  w.block_n = b[0].get<int64_t>();
  w.block_k = b[1].get<int64_t>();
  w.scale_suffix = "_scale_inv";
  return w;
}

WeightQuantization parse_compressed_tensors(const nlohmann::json& q, const std::string& path) {
  const std::string format = str_or(q, "format", "");
  if (format != "float-quantized") refuse(path, "compressed-tensors format '" + format + "'");
  if (!q.contains("config_groups") || !q["config_groups"].is_object() || q["config_groups"].empty())
    refuse(path, "compressed-tensors without config_groups");
  for (const auto& [name, g] : q["config_groups"].items()) {
    const std::string where = "config_groups." + name;
    if (!g.contains("weights") || !g["weights"].is_object()) refuse(path, where + " without weights");
    const nlohmann::json& w = g["weights"];
    const int64_t bits = w.value("num_bits", int64_t{0});
    const std::string type = str_or(w, "type", ""), strategy = str_or(w, "strategy", "");
    if (bits != 8 || type != "float") refuse(path, where + ".weights " + std::to_string(bits) + "-bit " + type);
    if (strategy != "channel") refuse(path, where + ".weights.strategy '" + strategy + "'");
    if (!w.value("symmetric", true)) refuse(path, where + ".weights asymmetric");
    if (g.contains("input_activations") && !g["input_activations"].is_null()) {
      const nlohmann::json& a = g["input_activations"];
      const std::string as = str_or(a, "strategy", "");
      if (!a.value("dynamic", false) || as != "token")
        refuse(path, where + ".input_activations (strategy '" + as + "', " +
                         (a.value("dynamic", false) ? "dynamic" : "static") + "; we quantize per token, dynamically)");
    }
  }
  WeightQuantization w;
  w.scales = Fp8Scales::Channel;
  w.scale_suffix = "_scale";
  return w;
}

}  // namespace

std::string WeightQuantization::describe() const {
  switch (scales) {
    case Fp8Scales::None: return "none";
    case Fp8Scales::Block: return "fp8 (" + std::to_string(block_n) + "x" + std::to_string(block_k) + " block scales)";
    case Fp8Scales::Channel: return "compressed-tensors fp8 (per-channel scales)";
  }
  return "?";
}

WeightQuantization parse_weight_quantization(const nlohmann::json& config, const std::string& path) {
  if (!config.contains("quantization_config") || config["quantization_config"].is_null()) return {};
  const nlohmann::json& q = config["quantization_config"];
  if (!q.is_object()) refuse(path, "(not an object)");
  const std::string method = str_or(q, "quant_method", "");
  if (method == "fp8") return parse_hf_fp8(q, path);
  if (method == "compressed-tensors") return parse_compressed_tensors(q, path);
  refuse(path, "quant_method '" + method + "'");
}

WeightQuantization load_weight_quantization(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  if (!std::filesystem::exists(path)) return {};
  return parse_json_file(path, [](const nlohmann::json& j, const std::string& p) { return parse_weight_quantization(j, p); });
}

}  // namespace vlm
