// The language model of any checkpoint the server serves, for the tools that run text prompts
// through it only (vlm-search-patterns, vlm-calibrate-sink): a text checkpoint's decoder
// (LlmDecoder::load), or a vision-language checkpoint's (LLaVA, Qwen2-VL / Qwen2.5-VL,
// LLaVA-OneVision, Qwen3-VL and Qwen3-VL-MoE: the family's model is loaded, vision tower included,
// and its decoder used; Qwen3-VL's decoder takes text with plain positions, its M-RoPE sections
// then coincide).
#pragma once

#include <memory>
#include <string>

#include "model/decoder/llm_decoder.h"
#include "model/families/model.h"

namespace vlm::cli {

struct LanguageModel {
  std::unique_ptr<Model> model;  // load_model(dir): a text or a vision-language checkpoint
  const LlmDecoder& decoder() const { return model->decoder(); }
};

// Throws LoadError as detect_architecture and the family's load do (naming the file and field).
LanguageModel load_language_model(const std::string& model_dir);

}  // namespace vlm::cli
