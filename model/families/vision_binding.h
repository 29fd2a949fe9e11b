// VisionBinding: which vision architecture (model/arch) a model's media side is, with what
// another backend builds its own copy of it from (the specs and the checkpoint's tensors). The
// GPU's media encoder (engine/cuda/cuda_media_encoder.h) picks its runner by the alternative held,
// so a family names its architecture here once and no backend names the family.
#pragma once

#include <variant>

#include "model/arch/llava_wiring.h"
#include "model/arch/onevision_wiring.h"
#include "model/families/qwen3_vl_config.h"
#include "model/layers/weight_source.h"

namespace vlm {

class Qwen2VisionEncoder;

// LLaVA: the CLIP / SigLIP tower and the projector (LlavaVision).
struct LlavaVisionBinding {
  LlavaVisionSpec spec;
  WeightSource tower;      // ClipVisionTower's names under it
  WeightSource projector;  // "linear_1.*", "linear_2.*"
};

// LLaVA-OneVision: LLaVA's tower and projector over tiles and frames, then OnevisionWiring.
struct OnevisionVisionBinding {
  OnevisionSpec spec;
  WeightSource tower, projector;
  WeightSource newline_source;  // where `newline` is
  WeightRef newline;            // image_newline [C]
};

// Qwen2-VL / Qwen2.5-VL: the tower with its merger (Qwen2VisionTower; the encoder holds its
// config and tensors).
struct Qwen2VisionBinding {
  const Qwen2VisionEncoder* encoder = nullptr;
};

// Qwen3-VL: its tower (Qwen3VLVisionTower: position grid, DeepStack planes).
struct Qwen3VLVisionBinding {
  Qwen3VLVisionConfig config;
  WeightSource weights;  // "patch_embed.*", "blocks.N.*", ... under their prefix
};

using VisionBinding = std::variant<std::monostate, LlavaVisionBinding, OnevisionVisionBinding, Qwen2VisionBinding,
                                   Qwen3VLVisionBinding>;

}  // namespace vlm
