// Which model class a checkpoint directory holds, from config.json's `architectures`.
#pragma once

#include <memory>
#include <string>

#include "model/decoder/weights.h"

namespace vlm {

class Model;

enum class ModelArchitecture { CausalLM, Llava, Qwen2VL, LlavaOnevision, Qwen3VL };

// Reads DIR/config.json. Throws LoadError naming the file when it cannot be read, or when the
// architecture is not one of LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
// Qwen3MoeForCausalLM, LlavaForConditionalGeneration,
// Qwen2VLForConditionalGeneration, Qwen2_5_VLForConditionalGeneration,
// LlavaOnevisionForConditionalGeneration, Qwen3VLForConditionalGeneration,
// Qwen3VLMoeForConditionalGeneration (the message lists them; both Qwen2-VL classes are
// ModelArchitecture::Qwen2VL, both Qwen3-VL ones ModelArchitecture::Qwen3VL).
ModelArchitecture detect_architecture(const std::string& model_dir);

// The checkpoint as its family's Model (model/families/model.h): TextModel, LlavaModel,
// Qwen2VLModel, LlavaOnevisionModel or Qwen3VLModel by detect_architecture. Throws LoadError as
// detect_architecture and the family's load do (naming the file and field). options: where the
// weights come from (--load-format; WeightStore::open).
std::unique_ptr<Model> load_model(const std::string& model_dir, const WeightLoadOptions& options = {});

}  // namespace vlm
