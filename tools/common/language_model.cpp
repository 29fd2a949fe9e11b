#include "tools/common/language_model.h"

#include "model/families/architecture.h"
#include "model/families/llava.h"
#include "model/families/llava_onevision.h"
#include "model/families/qwen2_vl.h"
#include "model/families/qwen3_vl.h"

namespace vlm::cli {

LanguageModel load_language_model(const std::string& model_dir) {
  LanguageModel m;
  switch (detect_architecture(model_dir)) {
    case ModelArchitecture::CausalLM:
      m.text = LlmDecoder::load(model_dir);
      break;
    case ModelArchitecture::Llava:
      m.vlm = LlavaModel::load(model_dir);
      break;
    case ModelArchitecture::Qwen2VL:
      m.vlm = Qwen2VLModel::load(model_dir);
      break;
    case ModelArchitecture::LlavaOnevision:
      m.vlm = LlavaOnevisionModel::load(model_dir);
      break;
    case ModelArchitecture::Qwen3VL:
      m.vlm = Qwen3VLModel::load(model_dir);
      break;
  }
  return m;
}

}  // namespace vlm::cli
