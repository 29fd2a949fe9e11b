#include "model/families/architecture.h"
#include "model/decoder/json_file.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/families/llava.h"
#include "model/families/llava_onevision.h"
#include "model/families/model.h"
#include "model/families/qwen2_vl.h"
#include "model/families/qwen3_vl.h"

namespace vlm {

ModelArchitecture detect_architecture(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  const nlohmann::json j = read_json_file(path);
  std::string arch, model_type;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    arch = j["architectures"][0].get<std::string>();
  if (j.contains("model_type") && j["model_type"].is_string()) model_type = j["model_type"].get<std::string>();
  if (arch == "LlavaForConditionalGeneration" || (arch.empty() && model_type == "llava"))
    return ModelArchitecture::Llava;
  if (arch == "Qwen2VLForConditionalGeneration" || arch == "Qwen2_5_VLForConditionalGeneration" ||
      (arch.empty() && (model_type == "qwen2_vl" || model_type == "qwen2_5_vl")))
    return ModelArchitecture::Qwen2VL;
  if (arch == "Qwen3VLForConditionalGeneration" || arch == "Qwen3VLMoeForConditionalGeneration" ||
      (arch.empty() && (model_type == "qwen3_vl" || model_type == "qwen3_vl_moe")))
    return ModelArchitecture::Qwen3VL;  // dense or MoE decoder: Qwen3VLConfig reads which
  if (arch == "LlavaOnevisionForConditionalGeneration" || (arch.empty() && model_type == "llava_onevision"))
    return ModelArchitecture::LlavaOnevision;
  if (arch == "LlamaForCausalLM" || arch == "Qwen2ForCausalLM" || arch == "Qwen3ForCausalLM" ||
      arch == "Qwen3MoeForCausalLM" ||
      (arch.empty() && (model_type == "llama" || model_type == "qwen2" || model_type == "qwen3" ||
                        model_type == "qwen3_moe")))
    return ModelArchitecture::CausalLM;
  throw LoadError(path + ": unsupported architecture '" + arch + "' (model_type '" + model_type +
                  "'); supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, "
                  "LlavaForConditionalGeneration, "
                  "Qwen2VLForConditionalGeneration, Qwen2_5_VLForConditionalGeneration, "
                  "LlavaOnevisionForConditionalGeneration, Qwen3VLForConditionalGeneration, "
                  "Qwen3VLMoeForConditionalGeneration");
}

std::unique_ptr<Model> load_model(const std::string& model_dir, const WeightLoadOptions& options) {
  switch (detect_architecture(model_dir)) {
    case ModelArchitecture::CausalLM: return TextModel::load(model_dir, options);
    case ModelArchitecture::Llava: return LlavaModel::load(model_dir, options);
    case ModelArchitecture::Qwen2VL: return Qwen2VLModel::load(model_dir, options);
    case ModelArchitecture::LlavaOnevision: return LlavaOnevisionModel::load(model_dir, options);
    case ModelArchitecture::Qwen3VL: return Qwen3VLModel::load(model_dir, options);
  }
  throw InternalError("unknown model architecture");
}

}  // namespace vlm
