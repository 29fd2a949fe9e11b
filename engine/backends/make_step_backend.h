// Picks and builds the engine's StepBackend from EngineConfig::device (engine/engine_config.h).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/backends/step_backend.h"
#include "engine/engine_config.h"
#include "model/families/model.h"

namespace vlm {

// "auto", "cpu", "cuda" -> Device; nullopt for anything else.
std::optional<Device> parse_device(const std::string& name);
const char* device_name(Device d);

// True when this build has the CUDA backend and a GPU is visible; the reason otherwise (why may
// be null).
bool cuda_available(std::string* why = nullptr);

// Resolves Auto and builds the backend: the CPU one with a cache of config.num_kv_blocks (else
// kv_cache_memory_gib) blocks, the CUDA one sized by gpu_memory_utilization. Throws LoadError
// for device cuda without the backend or a GPU, a bad block size, or a cache that cannot hold one
// sequence of max_model_len tokens when the user set it (EngineConfig::max_model_len > 0; one taken
// from the model is the Engine's to lower), and (before any GPU is opened) for device cuda when the GPU
// kernels cannot run the model's shapes or the asked-for methods (cuda_model_support.h; the
// message names each problem). Device auto then picks the CPU, with a warning. --quantization fp8
// (EngineConfig::quantize_fp8) on the CPU is a LoadError.
// The CUDA backend also puts the model's vision encoder on the GPU where it has one there
// (Model::vision_binding). The model must outlive the backend.
std::unique_ptr<StepBackend> make_step_backend(const EngineConfig& config, const Model& model,
                                               std::vector<int32_t> eos_token_ids, int64_t max_model_len);

}  // namespace vlm
